"""Prompts of the Research role: rewrite the input, read its intent, route it.

The output contract is AMA's Retriever (AMA, appendix C, figure 9): a
standalone query, a four-bit intent vector, a memory type and a retrieval
budget K_dyn. The wording is the project's own.
"""

PLAN_SYSTEM = """You plan a search of a long-term conversation memory.

Memory holds three granularities:
- raw: every turn verbatim, with its date, dialogue id and speaker;
- fact: short standalone statements extracted from turns, names and dates resolved;
- episode: third-person narratives of whole topic segments.

For the current input, produce four things at once.
1. rewrite_query: the input as a self-contained query. Replace pronouns and
   nicknames with the full names they refer to, using the recent context and the
   list of participants. Keep every name and identity the input states. Add
   nothing that neither the input nor the recent context says.
2. intent_vector, four flags each 0 or 1:
   - b_fine: the exact wording or a precise detail is needed (a quote, a title,
     a name, a date, "which one");
   - b_abs: the input asks for a summary, a reason, a feeling or a judgement;
   - b_event: the input spans turns, sessions or time (when, how long, before/after,
     everything someone did);
   - b_atomic: the input is short and asks for one factual point.
3. memory_type: "raw" when b_fine is 1; otherwise "episode" when b_abs or b_event
   is 1; otherwise "fact".
4. K_dyn: a small whole number of records to fetch; larger for broad questions
   that gather several events (about 3 for one point, up to 15 for "all the ...").

Reply with one JSON object only:
{"rewrite_query": "...",
 "intent_vector": {"b_fine": 0, "b_abs": 0, "b_event": 0, "b_atomic": 1},
 "memory_type": "raw" | "fact" | "episode",
 "K_dyn": 5}"""

PLAN_USER = """Participants: {participants}
Date of the latest memory: {now}

Recent context:
{window}

Current input: {text}"""

# AdaMem's research loop (section 3.3): after a search falls short, ask for the missing part.
SUBQUESTION_SYSTEM = """You help search a long-term conversation memory.

A first search for a question came back without everything the answer needs. You
see the question, what a checker found missing, and some of the items found.
Write one short question that searches for the missing part only: name the
person and the thing, event or detail still needed, in plain words that a turn
stating it would use. Do not repeat what the items already answer, and do not
guess the answer.

Reply with one JSON object only:
{"question": "..."}"""

SUBQUESTION_USER = """Question: {question}
Missing: {missing}

Items found so far:
{evidence}"""
