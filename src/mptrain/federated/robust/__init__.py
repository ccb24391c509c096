"""Robust aggregation and attacks (issue 41) as plain functions; the map is filled in below."""
