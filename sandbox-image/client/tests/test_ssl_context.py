"""Clients share one TLS context: httpx would load the CA bundle for each (client.py says why)."""

import ssl

from kubecua_sandbox_client.client import SandboxClient, shared_ssl_context


async def test_every_client_uses_the_one_shared_verifying_context() -> None:
    clients = [SandboxClient(f"http://127.0.0.1:{8000 + i}", "t") for i in range(3)]
    try:
        contexts = {id(c._http._transport._pool._ssl_context) for c in clients}  # type: ignore[attr-defined]
        assert contexts == {id(shared_ssl_context())}
        ctx = shared_ssl_context()
        assert ctx.verify_mode == ssl.CERT_REQUIRED  # still verifies
        assert ctx.check_hostname
    finally:
        for c in clients:
            await c.aclose()
