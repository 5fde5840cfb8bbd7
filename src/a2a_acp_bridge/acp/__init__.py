"""The ACP side: adapter processes, the bridge's ACP client, and sessions. Every import of
the ACP SDK (`acp`) stays inside this package."""
