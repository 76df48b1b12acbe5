"""QAEnv: a multi-hop question in the search sandbox, as a ToolEnv."""

from __future__ import annotations

import re
from typing import Any

from star.env.core import StepResult, ToolEnv
from star.env.faults import with_faults
from star.env.parse import parse_action
from star.qa.data import Question
from star.qa.evaluate import NAIVE_RAG_SYSTEM_PROMPT, naive_rag_prompt
from star.qa.search import QATools

# The same tag conventions as the travel prompt, and the tool in one line.
QA_SYSTEM_PROMPT = """You answer questions by searching a knowledge base, one hop at a time. Think in <think>...</think>, call one tool as <tool_call>{"name": "Search", "arguments": {"query": ...}}</tool_call>, and end with a short answer in <answer>...</answer>.
Tools: Search{query}."""
# Base Tool Call: function calling as an instruct model knows it, the tool's schema in the chat
# template's own tool section; a reply that calls no tool is the answer, as in an OpenAI-style agent.
BASE_TOOL_CALL_SYSTEM_PROMPT = "You answer questions by searching a knowledge base with the Search tool, one hop at a time. When you know the answer, reply with the answer alone."
_LEAD_IN = re.compile(r"answer(?:\s+is\s*:?|\s*:)\s*", re.IGNORECASE)


def plain_answer(text: str) -> str:
    """The answer in a reply written without tags, as an untrained chat model writes one ("The
    answer is: Tavin."): what follows the last "answer is", else the first line. EM and F1
    normalise case, articles and punctuation."""
    text = re.sub(r"</?[a-z_]+>|\*", " ", text).strip()  # tags and markdown emphasis
    lead_ins = list(_LEAD_IN.finditer(text))
    if lead_ins and text[lead_ins[-1].end() :].strip():
        text = text[lead_ins[-1].end() :]
    return text.strip().splitlines()[0].strip() if text.strip() else ""


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


class BaseToolCallEnv(QAEnv):
    """The Base Tool Call baseline: the untrained model with its tool's schema and a plain
    instruction; any reply that calls no tool ends the episode as its answer."""

    system_prompt = BASE_TOOL_CALL_SYSTEM_PROMPT

    def _step(self, assistant_text: Any) -> StepResult:
        return _answered(self, assistant_text) or super()._step(assistant_text)


def _answered(env: ToolEnv, text: Any) -> StepResult | None:
    """Take a reply with no tool call as the final answer: in <answer> tags if it has them, else plain."""
    if not isinstance(text, str) or "<tool_call>" in text:
        return None
    env.turns += 1
    env.answer = parse_action(text).answer or plain_answer(text)
    env.done = True
    return StepResult("", done=True, info={"kind": "answer"})


class NaiveRAGEnv(ToolEnv):
    """The Naive RAG baseline as a one-turn episode: one retrieval with the
    question goes into the prompt, no tools, the first reply is the answer
    (in <answer> tags, or plain text as an untrained model writes it)."""

    system_prompt = NAIVE_RAG_SYSTEM_PROMPT

    def __init__(self, tools: QATools):
        super().__init__([], max_turns=1)
        self.qa_tools = tools

    def prompt(self, task: Question) -> str:
        return naive_rag_prompt(task, self.qa_tools.index, self.qa_tools.top_k, self.qa_tools.max_words)[-1]["content"]

    def _step(self, assistant_text: Any) -> StepResult:
        return _answered(self, assistant_text) or super()._step(assistant_text)

    @property
    def question(self) -> Question:
        return self.task
