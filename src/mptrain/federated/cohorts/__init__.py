"""Clients trained stacked in cohorts (issue 39); the map is filled in below."""
