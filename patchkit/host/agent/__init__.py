"""The host agent, control side: its client (client.py), which starts it through a transport and
sends it requests; the typed ops (protocol.py); the host files and the ops they declare
(files.py, pure). What runs on the host is in host/remote/. Nothing is imported here, so that
knowing the host files does not load the running client (asyncio)."""
