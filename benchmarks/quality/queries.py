"""Known-item queries, generated the way an agent writes them (seeded).

An agent looking for one message it half remembers types a few words of it. Four kinds, in
equal shares, each from one target message:

- `subject`: 2 or 3 words of the subject;
- `body`: 2 or 3 words of the body, taken from one paragraph (words an agent remembers together);
- `sender`: the sender's name (or the address's local part) plus one word of the subject;
- `phrase`: 2 or 3 consecutive words of the body in double quotes, as they appear there,
  whatever the layout between them (a line break included).

Words are lower-cased, of 3 to 24 letters or digits, not in `STOPWORDS`; a target that cannot
give its kind of query is skipped. Queries that are identical to an earlier one are dropped.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .corpus import Mail

__all__ = ["KINDS", "Query", "make_queries"]

KINDS = ("subject", "body", "sender", "phrase")
STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "you",
        "your",
        "with",
        "that",
        "this",
        "from",
        "have",
        "are",
        "was",
        "were",
        "will",
        "would",
        "can",
        "could",
        "not",
        "but",
        "all",
        "any",
        "our",
        "out",
        "get",
        "has",
        "had",
        "his",
        "her",
        "its",
        "who",
        "what",
        "when",
        "where",
        "which",
        "there",
        "their",
        "them",
        "then",
        "than",
        "been",
        "being",
        "into",
        "about",
        "just",
        "more",
        "some",
        "such",
        "only",
        "also",
        "very",
        "may",
        "might",
        "must",
        "shall",
        "should",
        "http",
        "https",
        "www",
        "com",
        "net",
        "org",
        "html",
        "re",
        "fw",
        "fwd",
        "subject",
    ]
)
_WORD = re.compile(r"[^\W_]{3,24}")
_BODY_CHARS = 4000


@dataclass(frozen=True, slots=True)
class Query:
    kind: str
    q: str
    target: str
    """The record id of the wanted message (in `messages` and `message_bodies` alike)."""


def _words(text: str) -> list[str]:
    return [w for w in (m.group().lower() for m in _WORD.finditer(text)) if w not in STOPWORDS]


def _pick(rng: random.Random, words: Sequence[str], low: int, high: int) -> list[str] | None:
    unique = list(dict.fromkeys(words))
    if len(unique) < low:
        return None
    count = rng.randint(low, min(high, len(unique)))
    start = rng.randrange(0, len(unique) - count + 1)
    window = unique[start : start + max(count * 3, 6)]
    return rng.sample(window, min(count, len(window)))


def _phrase(rng: random.Random, body: str) -> str | None:
    tokens = list(re.finditer(r"\S+", body[:_BODY_CHARS]))
    runs: list[str] = []
    for n in range(len(tokens) - 2):
        size = rng.choice((2, 3))
        group = tokens[n : n + size]
        wordy = all(re.fullmatch(r"[^\W_]{2,24}", t.group()) for t in group)
        if len(group) == size and wordy and any(t.group().lower() not in STOPWORDS for t in group):
            runs.append(" ".join(t.group().lower() for t in group))
    return f'"{rng.choice(runs)}"' if runs else None


def _one(rng: random.Random, mail: Mail, kind: str) -> str | None:
    if kind == "subject":
        picked = _pick(rng, _words(mail.subject), 2, 3)
    elif kind == "body":
        paragraphs = [p for p in mail.body[:_BODY_CHARS].split("\n\n") if len(_words(p)) >= 3]
        picked = _pick(rng, _words(rng.choice(paragraphs)), 2, 3) if paragraphs else None
    elif kind == "sender":
        who = _words(mail.from_name) or _words(mail.from_email.split("@")[0])
        topic = _words(mail.subject)
        picked = [rng.choice(who), rng.choice(topic)] if who and topic else None
    else:
        return _phrase(rng, mail.body)
    return " ".join(picked) if picked else None


def make_queries(mails: Sequence[Mail], count: int, seed: int = 14) -> list[Query]:
    """`count` known-item queries (fewer if the mails cannot give them), kinds in turn."""
    rng = random.Random(seed)
    seen: set[str] = set()
    queries: list[Query] = []
    attempts = 0
    while len(queries) < count and attempts < count * 20:
        kind = KINDS[attempts % len(KINDS)]
        attempts += 1
        mail = rng.choice(mails)
        q = _one(rng, mail, kind)
        if q is None or q in seen:
            continue
        seen.add(q)
        queries.append(Query(kind, q, mail.record_id))
    return queries
