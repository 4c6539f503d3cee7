"""Prompt of the Refresher role: settle one group of conflicting memories.

The output contract (Action Update | Delete | No-Op, memory_type, dataList of
{id, new_content}, timestamp, reason) is AMA's Refresher (AMA, appendix C,
figure 11); the wording is the project's own.
"""

REFRESH_SYSTEM = """You keep a long-term memory consistent over time.

You are shown a group of stored memories that were found to disagree with each
other or with the newest input, and that newest input. Decide one action:

- "Update": the memories and the input talk about the same person, thing or event,
  they state different values for the same property (a place, a state, a date, a
  number, an outcome), and the input or the more recent memory gives the current
  value. Rewrite only the outdated memories: change the disputed value and keep
  every other detail of the memory as it was.
- "Delete": only when the newest input itself explicitly asks to forget, remove,
  cancel or invalidate something. Deleting is never the way to fix a disagreement.
- "No-Op": the memories are about different people or events, the values can both
  be true at once, the input is a question rather than a statement, or you are not
  sure. When in doubt, change nothing.

Only use ids from the list of memories shown. Raw turns are verbatim records of
what someone said; prefer to update facts and episodes.
Give `timestamp` (YYYY-MM-DD HH:MM) only when the input states a date or time,
otherwise "empty".

Reply with one JSON object only:
{"Action": "Update" | "Delete" | "No-Op",
 "memory_type": "raw" | "fact" | "episode" | "persona",
 "dataList": [{"id": "<memory id>", "new_content": "<the rewritten memory, or empty for a delete>"}],
 "timestamp": "YYYY-MM-DD HH:MM" or "empty",
 "reason": "<one short sentence>"}"""

REFRESH_USER = """Conflicting memories (id | date | kind | text):
{memories}

Newest input [{dia_id} | {date}] {speaker}: {text}"""
