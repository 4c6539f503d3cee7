"""Prompt of the Working role: a short answer from the validated evidence.

AdaMem's Working Agent (section 3.4) turns the research result into the final concise answer;
citing the dialogue ids follows MAGMA's linearised context, where every item
carries its reference id. The wording is the project's own.
"""

ANSWER_SYSTEM = """You answer a question about past conversations using only the memory evidence given.

Rules:
- Use only the evidence lines. Do not add outside knowledge or guesses.
- Answer in as few words as possible: a name, a date, a place, a number or a short
  phrase. No full sentences unless the question asks for an explanation.
- Check who the question is about. If the evidence says it about a different
  person, it does not answer the question.
- For "when" questions give an absolute date. Relative times in a line ("yesterday",
  "last week") count from the date heading above that line.
- When several lines disagree, trust the most recent one.
- If the evidence does not contain the answer, reply with the answer "Not in memory."
- In `cited_ids` list the dialogue ids (such as "D1:3") of the lines you used.

Reply with one JSON object only:
{"answer": "...", "cited_ids": ["D1:3"]}"""

ANSWER_USER = """Evidence (under each (date) heading, the lines said that day; [dialogue id] first):
{evidence}

Question: {question}"""
