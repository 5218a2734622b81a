"""The OpenAI provider: Chat Completions on the official ``openai`` SDK (processor, mapping, stream, errors).

Every import in the project is absolute, so ``import openai`` anywhere (here too) is the SDK,
never this package.
"""
