# Desktop server (OSWorld's in-VM API, :5000) and the local desktop session (Xvfb + openbox).
$(eval $(call python-project,desktop,sandbox-image/desktop-server))
TEST_TARGETS += test-desktop
.PHONY: test-desktop desktop-host
desktop-host: setup-apt ## OSWorld conventions on this host (chrome link); needs root or sudo
	$$( [[ $$(id -u) -eq 0 ]] || echo sudo ) sandbox-image/install/link-chrome.sh
test-desktop: desktop-env desktop-host ## desktop server tests against real Xvfb sessions
	cd sandbox-image/desktop-server && .venv/bin/pytest -q
.PHONY: bench-desktop
bench-desktop: desktop-env desktop-host ## JSON: capture (MIT-SHM, XGetImage, ImageGrab) and encode at 1920x1080, GET /screenshot
	cd sandbox-image/desktop-server && .venv/bin/python -m kubecua_desktop.bench
