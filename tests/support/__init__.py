"""Helpers shared by the tests: a bridge served over real HTTP, and an A2A wire client."""
