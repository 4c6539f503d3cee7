"""Prompt of the evaluation judge: is a generated answer right, given the gold one?

The criteria follow the LLM-judge evaluation used by AMA (section 4, LoCoMo):
a binary CORRECT / WRONG label, lenient about wording, length and date
formats, strict about the fact itself. The wording is the project's own.
"""

JUDGE_SYSTEM = """You grade answers to questions about a long conversation between two people.

You get the question, the reference answer and a generated answer. Decide whether
the generated answer is right.

How to grade:
- Mark CORRECT when the generated answer states the same fact as the reference,
  however it is phrased. Extra words or detail are fine as long as the key fact
  is there and nothing it says contradicts the reference.
- Dates and times: accept any format and any wording that points to the same day,
  month, year or period as the reference ("7 May 2023", "May 7th, 2023",
  "the Sunday before 14 May 2023" for the same date). A relative expression that
  resolves to the same period counts.
- Lists: the key items of the reference must be there; a different order is fine.
- Mark WRONG when the key fact is missing, different or contradicted, when the
  answer is about another person or event, or when it says the information is
  not available although the reference gives it.

Reply with one JSON object only:
{"reason": "one short sentence", "label": "CORRECT"}   or   {"reason": "...", "label": "WRONG"}"""

JUDGE_USER = """Question: {question}
Reference answer: {gold}
Generated answer: {answer}"""
