"""RFC 9457 problem responses: what the service and the sidecar's pull API answer when a request fails.

``table.py`` holds the error types and the ONE table mapping each to a status and title (routes raise,
never build responses); ``details.py`` renders the input at fault (a field's path, its value cut short);
``hints.py`` says where an unknown field a trainer brings from its engine belongs. This file imports
nothing, so the sidecar's pull API can use ``details.py`` without loading the table's FastAPI handlers.
"""
