"""Chat prompts shipped under ``calibration/``: a JSON list of ``{"messages": [...]}`` entries,
each message ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from builder.errors import DataError

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class Conversation:
    messages: tuple[Message, ...]

    def as_chat(self) -> list[dict[str, str]]:
        """The form ``apply_chat_template`` takes."""
        return [{"role": m.role, "content": m.content} for m in self.messages]


def load_conversations(path: Path, *, model: str) -> tuple[Conversation, ...]:
    """Read and check a prompts file; DataError names the file, the model and the entry."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("prompts file not found", file=path, model=model) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"not a JSON file: {exc}", file=path, model=model) from None
    if not isinstance(raw, list) or not raw:
        raise DataError("must be a non-empty JSON list of {messages: [...]}", file=path, model=model)
    return tuple(_conversation(entry, path, model, i) for i, entry in enumerate(raw))


def _conversation(entry: object, path: Path, model: str, index: int) -> Conversation:
    where = f"[{index}].messages"
    messages = entry.get("messages") if isinstance(entry, dict) else None
    if not isinstance(messages, list) or not messages:
        raise DataError("must be a non-empty list of messages", file=path, model=model, field=where)
    out = []
    for j, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        content = m.get("content") if isinstance(m, dict) else None
        if role not in ROLES or not isinstance(content, str) or not content.strip():
            raise DataError(
                f"each message needs a role ({', '.join(ROLES)}) and non-empty content",
                file=path,
                model=model,
                field=f"{where}[{j}]",
            )
        out.append(Message(str(role), content))
    if out[-1].role != "user":
        raise DataError("the last message must be the user's", file=path, model=model, field=where)
    return Conversation(tuple(out))
