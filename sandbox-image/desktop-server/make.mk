# Desktop server (OSWorld's in-VM API, :5000) and the local desktop session (Xvfb + openbox).
$(eval $(call python-project,desktop,sandbox-image/desktop-server))
TEST_TARGETS += test-desktop
.PHONY: test-desktop desktop-host desktop-account
desktop-host: setup-apt ## OSWorld conventions on this host (chrome link); needs root or sudo
	$$( [[ $$(id -u) -eq 0 ]] || echo sudo ) sandbox-image/install/link-chrome.sh
# A root-run local sandbox runs its desktop as this account (sudo, password "password"); not
# made when make runs unprivileged: such a sandbox runs as its invoker and needs no account.
desktop-account: setup-apt desktop-env ## the local sandbox's desktop account (kubecua-desktop) when run as root
	if [[ $$(id -u) -eq 0 ]]; then sandbox-image/install/local-desktop-user.sh $(CURDIR)/sandbox-image/desktop-server/.venv/bin/python; fi
test-desktop: desktop-env desktop-host ## desktop server tests against real Xvfb sessions
	cd sandbox-image/desktop-server && .venv/bin/pytest -q
.PHONY: bench-desktop
bench-desktop: desktop-env desktop-host ## JSON: capture (MIT-SHM, XGetImage, ImageGrab) and encode at 1920x1080, GET /screenshot
	cd sandbox-image/desktop-server && .venv/bin/python -m kubecua_desktop.bench $(BENCH_ARGS)
