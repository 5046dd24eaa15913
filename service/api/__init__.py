"""The HTTP API: request/response schemas, conversion to core types, and one router per resource."""
