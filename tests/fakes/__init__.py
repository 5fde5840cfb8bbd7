"""Fake model servers on 127.0.0.1: the real adapters run against these instead of a paid model."""
