# Desktop server (OSWorld's in-VM API, :5000) and the local desktop session (Xvfb + openbox).
$(eval $(call python-project,desktop,sandbox-image/desktop-server))
TEST_TARGETS += test-desktop
.PHONY: test-desktop desktop-host
desktop-host: setup-apt ## OSWorld conventions on this host (chrome link); needs root or sudo
	$$( [[ $$(id -u) -eq 0 ]] || echo sudo ) sandbox-image/install/link-chrome.sh
test-desktop: desktop-env desktop-host ## desktop server tests against real Xvfb sessions
	cd sandbox-image/desktop-server && .venv/bin/pytest -q
