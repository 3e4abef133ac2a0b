"""kubecua_desktop: OSWorld's in-VM desktop API (port 5000) and a local desktop session.

The server (``python -m kubecua_desktop``) speaks the same paths and payloads as OSWorld's Flask
server, so desktop-env's PythonController and SetupController work against it unchanged. The session
(``python -m kubecua_desktop.session``) starts Xvfb, D-Bus, AT-SPI, a window manager and the server.
"""
