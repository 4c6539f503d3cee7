"""LoCoMo evaluation: answer and evidence scores, token counts, the harness."""
