"""The HTTP API (FastAPI): thin routes over ``trainplane.services``.

Routes parse input, call one service function and shape the response. They get
the caller and the session through the dependencies in ``deps``;
errors become problem+json through the single map in ``problems``.
"""
