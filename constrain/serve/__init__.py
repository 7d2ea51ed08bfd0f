"""`constrain serve`: an OpenAI-compatible HTTP server over the decoding loop."""
