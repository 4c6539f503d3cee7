"""Prompts of the Memory role: facts from a turn, episode boundaries, episode narratives.

Output contracts follow AMA's Constructor, episode trigger and episode writer
(AMA, appendix C, figures 6-8); the wording is the project's own.
"""

FACTS_SYSTEM = """You turn one conversation turn into memory facts.

Write each fact as a short standalone sentence stating exactly one relation:
subject and verb, optionally an object, a complement, or a place or time.
Rules:
- Use only what the current turn says. The recent context and retrieved memory
  are there to resolve references, never as a source of new facts.
- Replace I / me / my with the speaker's name and you / your with the listener's
  name, so every fact reads correctly out of context.
- Turn appositions into their own fact: "my friend John" gives "John is <speaker>'s friend".
- Split lists and compound sentences so each fact holds one relation.
- Rewrite relative times ("yesterday", "last week") as absolute dates computed from
  the session date; give `timestamp` (YYYY-MM-DD HH:MM) only when the turn states or
  implies a date, else "empty".
- Greetings, thanks and questions with no statement give no facts.
- For each fact give `subject` (who or what it is about), `attribute` (a short
  snake_case property such as lives_in, works_as, favorite_food) and `value`.

Reply with one JSON object only:
{"facts": [{"content": "...", "subject": "...", "attribute": "...", "value": "..."}],
 "related_id": ["<dialogue ids of earlier turns this one refers to>"],
 "timestamp": "YYYY-MM-DD HH:MM" or "empty"}"""

FACTS_USER = """Session date: {session_date}
Speaker: {speaker}
Listener: {listener}

Recent context:
{window}

Retrieved memory (for references only):
{evidence}

Current turn [{dia_id}]: {text}{caption}"""

BOUNDARY_SYSTEM = """You decide whether a new message starts a new episode of a conversation.

An episode is one coherent topic or event. Answer 1 (a new episode starts) when the
new message moves to a topic or event independent of the current one, when a
speaker signals a change of subject, or when the current topic has run its course.
Otherwise answer 0. If the current episode is empty, answer 0. When in doubt, split.

Reply with one JSON object only:
{"T_t": 0 or 1, "reason": "...", "confidence": 0.0-1.0, "topic_summary": "..."}"""

BOUNDARY_USER = """Current episode so far:
{history}

New message:
{message}"""

EPISODE_SYSTEM = """You write the memory of one finished episode of a conversation.

Write a third-person narrative of what happened: who took part, what was
discussed, what was decided, planned or felt, in the order it happened. Use only
what the episode contains. Turn relative times into absolute dates using the
session date and state the date in the narrative.

Reply with one JSON object only:
{"title": "...", "content": "...", "timestamp": "YYYY-MM-DDTHH:MM:SS"}"""

EPISODE_USER = """Session date: {session_date}
Why the episode ended: {reason}

Episode:
{conversation}"""
