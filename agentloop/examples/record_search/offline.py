"""Offline responders: meaningful answers from :class:`OfflineModel` with no API key.

A small deterministic keyword planner reads the user's request out of the
instruction (the ``<user_request>`` element the actions embed it in) and
turns phrases such as "companies in Germany", "deals over 50k in
negotiation", "contacts at Acme" or "CTOs at software companies" into a plan
over the catalog; the intent gate says "search" exactly when the planner
finds something to search for and the message reads like a request; the
composer writes a plain sentence from the result summary, labelled
``[offline model]``. The plans still go through the agent's own validation,
and the records come from the real database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree

from agentloop import OfflineModel
from agentloop.examples.record_search.actions.compose_answer import describe_result
from agentloop.examples.record_search.catalog import SEARCHABLE_CATEGORIES, SearchableCategory, find_category
from agentloop.examples.record_search.tools import CLASSIFY_INTENT_TOOL, COMPOSE_ANSWER_TOOL, PLAN_SEARCH_TOOL
from agentloop.orchestration.llm.offline import LABEL, Responder


def extract_embedded_text(instruction: str, tag: str) -> str | None:
    """The text of the first ``<tag>`` element :func:`agentloop.actions.embed_user_text` wrote, decoded.

    The element ends at the first ``]]></tag>``: the embedding splits every
    ``]]>`` of the text, so the text itself can never produce that sequence.
    """
    opening = f"<{tag}><![CDATA["
    start = instruction.find(opening)
    if start < 0:
        return None
    closing = f"]]></{tag}>"
    end = instruction.find(closing, start + len(opening))
    if end < 0:
        return None
    try:
        element = ElementTree.fromstring(instruction[start : end + len(closing)])
    except ElementTree.ParseError:
        return None
    return element.text or ""


# ----- the keyword planner ----------------------------------------------------------------------

_CATEGORY_WORDS: Mapping[str, str] = {
    "companies": (
        r"\b(compan(?:y|ies)|firms?|business(?:es)?|organi[sz]ations?|customers?|accounts?|clients?)\b"
    ),
    "contacts": r"\b(contacts?|people|persons?|person|colleagues?)\b",
    "deals": r"\b(deals?|opportunit(?:y|ies)|pipeline)\b",
}

_COUNTRY_WORDS: Mapping[str, str] = {
    "Germany": r"germany|german",
    "France": r"france|french",
    "United Kingdom": r"united kingdom|uk|u\.k\.|britain|british|england|english",
    "United States": r"united states|usa|u\.s\.a?\.?|us|america|american",
    "Japan": r"japan|japanese",
    "Netherlands": r"netherlands|holland|dutch",
    "Spain": r"spain|spanish",
    "Sweden": r"sweden|swedish",
}

_INDUSTRY_WORDS: Mapping[str, str] = {
    "Software": r"software|saas|tech",
    "Manufacturing": r"manufacturing|manufacturers?|industrial",
    "Healthcare": r"healthcare|health|medical|pharma(?:ceutical)?s?",
    "Finance": r"finance|financial|fintech|banks?|banking|insurance",
    "Retail": r"retail|retailers?|shops?|stores?",
    "Logistics": r"logistics|shipping|freight|transport",
    "Energy": r"energy|utilit(?:y|ies)|power",
    "Education": r"education|edtech|schools?|universit(?:y|ies)",
}

_STAGE_WORDS: Mapping[str, str] = {
    "lead": r"leads?",
    "qualified": r"qualified",
    "proposal": r"proposals?",
    "negotiation": r"negotiations?|negotiating",
    "won": r"won|closed[- ]won|winning",
    "lost": r"lost|closed[- ]lost",
}

_ROLE_WORDS: Mapping[str, str] = {
    "CEO": r"ceos?|chief executives?",
    "CTO": r"ctos?|chief technology officers?",
    "CFO": r"cfos?|chief financial officers?",
    "COO": r"coos?",
    "Sales": r"sales (?:people|reps?|managers?|staff)|vp sales|account executives?",
    "Procurement": r"procurement|buyers?|purchasing",
    "Engineer": r"engineers?|developers?",
    "Product Manager": r"product managers?",
    "Marketing": r"marketing|marketers?",
    "Analyst": r"analysts?",
}

_SEARCH_VERBS = (
    r"\b(find|show|list|search|look(?:ing)? (?:up|for)|which|who|how many|get|give|fetch|display|any|all|"
    r"are there|do we have)\b"
)

_NUMBER = r"(?:€|\$|eur\s*|usd\s*)?(\d[\d,]*(?:\.\d+)?)\s*(k|m|mn|million|thousand)?\b"
_MORE = r"over|above|more than|greater than|exceeding|at least|bigger than|larger than|>=?"
_LESS = r"under|below|less than|fewer than|at most|smaller than|<=?"
_HEADCOUNT = r"\s*(?:employees|people|staff|workers|headcount)"
_NAME_CONNECTOR = r"\b(?:at|from|of|for|with|by)\s+"
_NAME_WORD = r"[A-Z][\w&'.-]*"
_STOP_NAME_WORDS = frozenset(
    {"i", "me", "we", "us", "our", "the", "a", "an", "in", "and", "or", "who", "that"}
)


def _amount(number: str, unit: str | None) -> float:
    value = float(number.replace(",", ""))
    scale = {"k": 1e3, "thousand": 1e3, "m": 1e6, "mn": 1e6, "million": 1e6}.get((unit or "").lower(), 1.0)
    return value * scale


def _whole(value: float) -> int | float:
    return int(value) if value.is_integer() else value


def _keyword(patterns: Mapping[str, str], text: str) -> tuple[str, int] | None:
    """The key of the earliest pattern that matches ``text`` as whole words, and where."""
    best: tuple[str, int] | None = None
    for key, pattern in patterns.items():
        match = re.search(rf"\b(?:{pattern})(?![\w])", text)
        if match and (best is None or match.start() < best[1]):
            best = (key, match.start())
    return best


def _keyword_words() -> list[str]:
    return [
        pattern
        for group in (_CATEGORY_WORDS, _COUNTRY_WORDS, _INDUSTRY_WORDS, _STAGE_WORDS, _ROLE_WORDS)
        for pattern in group.values()
    ]


@dataclass
class _Reading:
    """What the planner understood: filters per category, and where each category was named."""

    filters: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    mentions: dict[str, int] = field(default_factory=dict)
    limit: int | None = None

    def mention(self, category: str, position: int) -> None:
        self.mentions[category] = min(position, self.mentions.get(category, position))

    def add(self, category: str, field_name: str, op: str, value: Any) -> None:
        self.filters.setdefault(category, []).append({"field": field_name, "op": op, "value": value})


def read_request(message: str) -> _Reading:
    """Pick the categories and conditions out of ``message``."""
    reading = _Reading()
    lowered = message.lower()
    for category, pattern in _CATEGORY_WORDS.items():
        match = re.search(pattern, lowered)
        if match:
            reading.mention(category, match.start())

    for op, words in (("gt", _MORE), ("lt", _LESS)):
        for match in re.finditer(rf"\b(?:{words})\s*{_NUMBER}{_HEADCOUNT}", lowered):
            reading.add("companies", "employee_count", op, int(_amount(match.group(1), match.group(2))))
    without_headcount = re.sub(rf"{_NUMBER}{_HEADCOUNT}", " ", lowered)
    between = re.search(rf"\bbetween\s*{_NUMBER}\s*and\s*{_NUMBER}", without_headcount)
    if between:
        reading.add("deals", "amount", "gte", _whole(_amount(between.group(1), between.group(2))))
        reading.add("deals", "amount", "lte", _whole(_amount(between.group(3), between.group(4))))
    else:
        for op, words in (("gt", _MORE), ("lt", _LESS)):
            match = re.search(rf"(?:^|\s)(?:{words})\s*{_NUMBER}", without_headcount)
            if match:
                reading.add("deals", "amount", op, _whole(_amount(match.group(1), match.group(2))))

    year = re.search(r"\bclos\w*\s+(?:in|during)\s+(20\d\d)\b", lowered)
    if year:
        reading.add("deals", "close_date", "gte", f"{year.group(1)}-01-01")
        reading.add("deals", "close_date", "lte", f"{year.group(1)}-12-31")
    top = re.search(r"\b(?:top|first|show me|list)\s+(\d{1,3})\b", lowered)
    if top and int(top.group(1)) > 0:
        reading.limit = int(top.group(1))

    # A stage names deals and a role names people, as much as the words "deals" and "contacts" do.
    stage = _keyword(_STAGE_WORDS, lowered)
    if stage is not None:
        reading.add("deals", "stage", "eq", stage[0])
        reading.mention("deals", stage[1])
    role = _keyword(_ROLE_WORDS, lowered)
    if role is not None:
        reading.add("contacts", "role", "contains", role[0])
        reading.mention("contacts", role[1])
    country = _keyword(_COUNTRY_WORDS, lowered)
    if country is not None:
        reading.add("companies", "country", "eq", country[0])
    industry = _keyword(_INDUSTRY_WORDS, lowered)
    if industry is not None:
        reading.add("companies", "industry", "eq", industry[0])
    name = _company_name(message)
    if name is not None:
        reading.add("companies", "name", "contains", name)
    return reading


def _company_name(message: str) -> str | None:
    """A capitalised name after "at", "from", "of", ... that is not a known keyword ("contacts at Acme")."""
    keywords = _keyword_words()
    for match in re.finditer(rf"{_NAME_CONNECTOR}((?:{_NAME_WORD})(?:\s+{_NAME_WORD})*)", message):
        words: list[str] = []
        for word in match.group(1).split():
            bare = word.strip(".,;:!?'\"").lower()
            if bare in _STOP_NAME_WORDS or any(re.fullmatch(pattern, bare) for pattern in keywords):
                break
            words.append(word.strip(".,;:!?\"'"))
        if words:
            return " ".join(words)
    return None


def _relation_to(source: SearchableCategory, target_id: str) -> str | None:
    return next((relation.name for relation in source.relations if relation.target == target_id), None)


def plan_request(
    message: str, categories: Sequence[SearchableCategory] = SEARCHABLE_CATEGORIES
) -> dict[str, Any]:
    """A plan for ``message`` over ``categories``; ``{"steps": []}`` when nothing is searchable in it."""
    reading = read_request(message)
    if reading.mentions:
        target = min(reading.mentions, key=lambda category: reading.mentions[category])
    elif "contacts" in reading.filters:
        target = "contacts"
    elif "deals" in reading.filters:
        target = "deals"
    elif reading.filters:
        target = "companies"
    else:
        return {"steps": []}
    order = [category for category in ("companies", "contacts", "deals") if category in reading.filters]
    chain = [category for category in order if category != target] + [target]
    steps: list[dict[str, Any]] = []
    for index, category_id in enumerate(chain):
        filters = reading.filters.get(category_id, [])
        if index == 0:
            steps.append({"category_id": category_id, "filters": filters})
            continue
        source = find_category(categories, chain[index - 1])
        relation = _relation_to(source, category_id) if source is not None else None
        if relation is None:
            return {"steps": []}
        steps.append({"follow": relation, "filters": filters})
    plan: dict[str, Any] = {"steps": steps}
    if reading.limit is not None:
        plan["limit"] = reading.limit
    return plan


def classify_request(
    message: str, categories: Sequence[SearchableCategory] = SEARCHABLE_CATEGORIES
) -> dict[str, Any]:
    """``{"is_search", "reason"}``: a search when it names records or conditions and reads like a request."""
    plan = plan_request(message, categories)
    reading = read_request(message)
    asks = bool(reading.mentions) or re.search(_SEARCH_VERBS, message.lower()) is not None
    if plan["steps"] and asks:
        named = ", ".join(sorted({*reading.mentions, *reading.filters}))
        return {"is_search": True, "reason": f"{LABEL} the message asks about {named}"}
    return {"is_search": False, "reason": f"{LABEL} no searchable records or conditions in the message"}


def compose_reply(message: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    """A plain sentence from the result summary, labelled as the offline model's."""
    sentence = describe_result(summary)
    labels = [
        str(record.get("label", "")) for record in summary.get("sample_records", ()) if record.get("label")
    ]
    if labels:
        listed = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + f" and {labels[-1]}"
        every = len(labels) == int(summary.get("found_count", 0))
        lead = ("It is" if len(labels) == 1 else "They are") if every else "Among them"
        sentence += f" {lead}: {listed}."
    return {"message": f"{LABEL} {sentence}"}


# ----- responders -------------------------------------------------------------------------------


def offline_responders(
    categories: Sequence[SearchableCategory] = SEARCHABLE_CATEGORIES,
) -> dict[str, Responder]:
    """Responders for :class:`OfflineModel`, by tool name, for the agent's three tools."""

    def classify(tool: Mapping[str, Any], instruction: str, history: Sequence[Mapping[str, Any]]) -> Any:
        return classify_request(extract_embedded_text(instruction, "user_request") or "", categories)

    def plan(tool: Mapping[str, Any], instruction: str, history: Sequence[Mapping[str, Any]]) -> Any:
        return plan_request(extract_embedded_text(instruction, "user_request") or "", categories)

    def compose(tool: Mapping[str, Any], instruction: str, history: Sequence[Mapping[str, Any]]) -> Any:
        try:
            summary = json.loads(extract_embedded_text(instruction, "result_summary") or "{}")
        except ValueError:
            summary = {}
        message = extract_embedded_text(instruction, "user_request") or ""
        return compose_reply(message, summary if isinstance(summary, dict) else {})

    return {
        str(CLASSIFY_INTENT_TOOL["name"]): classify,
        str(PLAN_SEARCH_TOOL["name"]): plan,
        str(COMPOSE_ANSWER_TOOL["name"]): compose,
    }


def create_offline_model(categories: Sequence[SearchableCategory] = SEARCHABLE_CATEGORIES) -> OfflineModel:
    """An :class:`OfflineModel` that answers the record-search tools meaningfully."""
    return OfflineModel(responders=offline_responders(categories))
