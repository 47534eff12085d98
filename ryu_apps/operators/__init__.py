"""operators/: what the operator sees and asks.

Rule: the REST API (``api``) and its OpenAPI document (``openapi``), Prometheus metrics (``metrics``),
``freeway status`` (``status``), the decision log (``decision_log``), the fabric view (``web/``), all
reading one surface of the running controller (``surface``) through pure documents (``opstate``).
Nothing here decides for the fabric: writes go through the mode's policy like a host's handshake.
"""
