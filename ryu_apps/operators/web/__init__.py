"""The fabric view's static files (index.html, view.js, view.css), served by the API at ``/``."""
