"""``tensorrt_llm/_utils.py`` (1.2 line): ``KVCacheEventSerializer``, on the double's event records.

The double's engine keeps an event as ``{"event_id", "window_size", "data"}`` with ``data``
already in serialized form; ``None`` stands for an absent event, which the real
``to_json_str`` turns into ``{}``.
"""


class KVCacheEventSerializer:
    @classmethod
    def serialize(cls, events):
        if events is None:
            return None
        if not isinstance(events, list):
            return cls.to_json_str(events)
        return [cls.to_json_str(e) for e in events]

    @classmethod
    def to_json_str(cls, event):
        if event is None:
            return {}
        return {"event_id": event["event_id"], "data": dict(event["data"]), "window_size": event["window_size"]}
