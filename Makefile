# Freeway: make install | make demo | make test
# Everything installs idempotently on a fresh Debian/Ubuntu machine, as root.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
DEBS := openvswitch-switch mininet iperf3 iperf ethtool iputils-ping nftables python3-venv python3-pip gcc g++ libc6-dev
# what only the tests use: a real browser for the fabric view, a real Prometheus to scrape /metrics, a real etcd
TEST_DEBS := chromium chromium-driver prometheus etcd-server etcd-client
OVS_CTL := /usr/share/openvswitch/scripts/ovs-ctl
PYTEST_ARGS ?= --durations=30  # the slowest tests in every run's output (CI keeps `make test` under 30 minutes)

.PHONY: install debs test-debs ovs venv hook samples demo test unit integration lint clean

install: debs ovs venv hook

# apt-get install the packages of $(1) that are missing (idempotent)
define apt_install
	@missing=""; for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

debs:
	$(call apt_install,$(DEBS))

test-debs:
	$(call apt_install,$(TEST_DEBS))

# The kernel has no openvswitch module here: ovs-ctl starts the daemons and we
# use the userspace datapath (datapath_type=netdev).
# ovs-vswitchd sends on every port through one packet socket whose buffer, taken
# from net.core.wmem_default when it is created, caps the packets queued in the
# whole fabric (see topology/builder.py). Raise it before ovs-vswitchd starts;
# restart an ovs-vswitchd that already has a smaller one, if it has no bridges.
SNDBUF := 33554432
ovs: debs
	@sysctl -qw net.core.wmem_max=$(SNDBUF) net.core.wmem_default=$(SNDBUF)
	@ovs-vsctl --timeout=5 show >/dev/null 2>&1 || $(OVS_CTL) start --system-id=random --no-monitor >/dev/null 2>&1 || $(OVS_CTL) start --system-id=random
	@tb=$$(ss -0 -m -n -p | grep '"ovs-vswitchd"' | grep -F '[0]:*' | grep -o 'tb[0-9]*' | tr -d tb); \
	if [ -n "$$tb" ] && [ "$$tb" -lt $(SNDBUF) ]; then \
	  if [ -z "$$(ovs-vsctl --timeout=5 list-br)" ]; then \
	    echo "restarting ovs-vswitchd: its packet send buffer is $$tb bytes"; \
	    $(OVS_CTL) restart --system-id=random >/dev/null; \
	  else echo "warning: ovs-vswitchd's packet send buffer is $$tb bytes and bridges exist: not restarting it"; fi; \
	fi
	@ovs-vsctl --timeout=5 show >/dev/null

# Python 3.11 or later (Debian 12, Ubuntu 24.04; Ubuntu 22.04's 3.10 is too old), with the versions the tests
# last passed with (requirements.txt) as constraints
$(VENV)/.installed: pyproject.toml setup.py requirements.txt examples/least-loaded/pyproject.toml
	@/usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "Freeway needs Python 3.11 or later as /usr/bin/python3 (found $$(/usr/bin/python3 --version 2>&1)): Debian 12 or Ubuntu 24.04"; exit 1; }
	@test -x $(PY) || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -c requirements.txt -e '.[test,experiments,ns3]'
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e examples/least-loaded  # a plug-in mode (docs/your-mode.md)
	@touch $@

venv: debs $(VENV)/.installed

# The connect() hook (freeway run): compiled here with the system's C compiler, never shipped built.
HOOK := $(VENV)/lib/freeway/libfreeway_hook.so
$(HOOK): hook/freeway_hook.c | venv
	@mkdir -p $(dir $@)
	cc -O2 -Wall -Wextra -Werror -fPIC -shared -o $@ $< -ldl -lpthread

hook: $(HOOK)

# os-ken's own sample applications, for the pytest plugin's example tests (examples/test_my_app.py): os-ken 3
# ships none, os-ken 1.4.0's source on PyPI has them (Apache-2.0); taken from there into the venv, never
# into this repository
SAMPLES := $(VENV)/share/freeway/os_ken_samples
$(SAMPLES)/simple_switch_13.py: | venv
	@mkdir -p $(SAMPLES) $(VENV)/share/freeway/tmp
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: os-ken==1.4.0 -d $(VENV)/share/freeway/tmp
	tar -xzf $(VENV)/share/freeway/tmp/os-ken-1.4.0.tar.gz -C $(VENV)/share/freeway/tmp os-ken-1.4.0/os_ken/app/simple_switch_13.py
	cp $(VENV)/share/freeway/tmp/os-ken-1.4.0/os_ken/app/simple_switch_13.py $@
	rm -rf $(VENV)/share/freeway/tmp

samples: $(SAMPLES)/simple_switch_13.py

# The main job: the mixed scenario on a k=4 fat-tree under ECMP, Hedera, EFM and Freeway with isolation (about 4 minutes).
demo: install
	-@mn -c >/dev/null 2>&1
	$(VENV)/bin/freeway experiment mixed --modes ecmp,hedera,efm-biggest,freeway+isolation --duration 30 --mtu 9000 --out results/demo

lint: venv
	$(VENV)/bin/ruff check ryu_apps topology monitoring experiments tests examples

unit: venv hook
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

integration: install test-debs samples
	-@mn -c >/dev/null 2>&1
	$(VENV)/bin/pytest -q tests/integration examples $(PYTEST_ARGS)

test: install test-debs samples lint
	-@mn -c >/dev/null 2>&1
	$(VENV)/bin/pytest -q tests examples $(PYTEST_ARGS)

clean:
	-@mn -c >/dev/null 2>&1
	rm -rf $(VENV) results .pytest_cache
