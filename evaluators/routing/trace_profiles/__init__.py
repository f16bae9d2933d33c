"""Trace profiles (JSON figures measured by bench/routing_trace_profile.py): data only."""
