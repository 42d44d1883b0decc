"""The one layer over fairlane's SQL."""
