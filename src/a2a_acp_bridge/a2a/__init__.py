"""The A2A side: the Starlette app, the agent card and the executor. Every import of the
A2A SDK (`a2a`) stays inside this package."""
