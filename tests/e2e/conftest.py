pytest_plugins = ["kubecua_testkit.fixtures"]
