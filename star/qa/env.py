"""QAEnv: a multi-hop question in the search sandbox, as a ToolEnv."""

from __future__ import annotations

from star.env.core import ToolEnv
from star.env.faults import with_faults
from star.qa.data import Question
from star.qa.evaluate import NAIVE_RAG_SYSTEM_PROMPT, naive_rag_prompt
from star.qa.search import QATools

# The same tag conventions as the travel prompt, and the tool in one line.
QA_SYSTEM_PROMPT = """You answer questions by searching a knowledge base, one hop at a time. Think in <think>...</think>, call one tool as <tool_call>{"name": "Search", "arguments": {"query": ...}}</tool_call>, and end with a short answer in <answer>...</answer>.
Tools: Search{query}."""


class QAEnv(ToolEnv):
    system_prompt = QA_SYSTEM_PROMPT

    def __init__(self, tools: QATools, max_turns: int = 8, fault_rate: float = 0.0, seed: int = 0):
        super().__init__(with_faults(tools.as_tools(), fault_rate, seed), max_turns=max_turns)
        self.qa_tools = tools  # the index behind the tool, for judging what a search found

    def prompt(self, task: Question) -> str:
        return task.question

    @property
    def question(self) -> Question:
        return self.task


class NaiveRAGEnv(ToolEnv):
    """The Naive RAG baseline as a one-turn episode: one retrieval with the
    question goes into the prompt, no tools, the first reply is the answer."""

    system_prompt = NAIVE_RAG_SYSTEM_PROMPT

    def __init__(self, tools: QATools):
        super().__init__([], max_turns=1)
        self.qa_tools = tools

    def prompt(self, task: Question) -> str:
        return naive_rag_prompt(task, self.qa_tools.index, self.qa_tools.top_k, self.qa_tools.max_words)[-1]["content"]

    @property
    def question(self) -> Question:
        return self.task
