"""Tokenizers: GPT-2's through tiktoken, a folder's tokenizer.json through `tokenizers`, and the checks on the files they read."""
