"""``tensorrt_llm/_utils.py`` (1.2 and 1.4 lines): ``KVCacheEventSerializer``, on the double's event records.

1.4 also writes the event's ``hash_algo`` and, under V2, its ``layer_group_id`` (PR #13589).

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
        out = {"event_id": event["event_id"], "data": dict(event["data"]), "window_size": event["window_size"]}
        return out | {k: event[k] for k in ("hash_algo", "layer_group_id") if k in event}
