"""The worker thread that owns the model: the client the GUI holds, the requests it sends, the handlers
that answer them. Nothing here imports Qt except client.py; handlers run on the worker thread only."""
