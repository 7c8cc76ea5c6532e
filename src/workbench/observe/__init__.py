"""Engine observers: parsers and recorders for the evidence channels a cell announces.

Each module here turns one engine's raw evidence (event payloads, metrics, connector calls, a
package's files) into plain contract types or dicts. None of them imports an engine at import time.
"""
