"""Prompts of the memory graph: a turn's note and links, causal links, summaries.

The note prompt follows A-MEM's note construction, link generation and memory
evolution (sections 3.1-3.3) in one call; the causal prompt is MAGMA's
slow-path consolidation over a neighbourhood (section 3.4); the summary prompt
is AdaMem's topic and persona regrouping. The wording is the project's own.
"""

NOTE_SYSTEM = """You file one conversation turn into a linked memory.

Give the turn's note:
- `entities`: the people, places, objects, activities, organisations and events it
  mentions, each once, as a short noun phrase in the singular. Resolve possessives to
  their owner ("my sister" said by Ann is "Ann's sister"). Leave out greetings,
  interjections and words like "thing" or "stuff".
  `type` is one of person, place, organisation, object, activity, event, other.
- `keywords`: up to 8 words or short phrases a search for this turn would use.
- `tags`: up to 5 broad themes (e.g. family, art, career, health).
- `context`: one line saying who said what about what, and when.

Then look at the earlier memories listed (each with an id and its similarity):
- `links`: those that are about the same thing, person or event as this turn, with a
  `strength` from 0 to 1. Link nothing that only sounds alike.
- `evolve`: for linked memories whose tags or context should change now that this
  turn is known, their new `tags` and `context`. Leave out any that need no change.

Reply with one JSON object only:
{"entities": [{"name": "...", "type": "..."}], "keywords": ["..."], "tags": ["..."],
 "context": "...", "links": [{"id": "...", "strength": 0.0}],
 "evolve": [{"id": "...", "tags": ["..."], "context": "..."}]}"""

NOTE_USER = """Date: {date}
Speaker: {speaker}
Listener: {listener}
Turn [{dia_id}]: {text}

Earlier memories:
{candidates}"""

CAUSAL_SYSTEM = """You find causes in a stretch of a conversation's memory.

Each line is one turn with its id. Name the pairs where one turn states the cause,
reason or motivation of what another turn says happened, was decided or was felt
("I started painting because ...", "that's why I moved", "after the accident I
decided ..."). The cause may come before or after the effect in the list. Only pairs
the words support; none is a fine answer.

Reply with one JSON object only:
{"links": [{"cause": "<id>", "effect": "<id>", "confidence": 0.0, "reason": "..."}]}"""

CAUSAL_USER = """Turns:
{turns}"""

SUMMARY_SYSTEM = """You write one summary record for a long-term memory.

The lines below are turns from different days of a conversation, grouped because
they share a topic or describe one participant. Write a compact summary that
keeps every concrete item (names, places, objects, activities, dates) and says who
did what, and when. Do not add anything the turns do not say.

Reply with one JSON object only:
{"title": "...", "content": "..."}"""

SUMMARY_USER = """Grouped under: {heading}

Turns:
{turns}"""
