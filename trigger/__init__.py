"""The HTTP trigger service: the input plane (POST /v1/inputs) and the read API."""
