"""Runnable examples shipped with tether."""
