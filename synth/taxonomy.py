"""The five task categories of EvoStreaming's stage 1 (seed 002, Appendix A.1 Table 5, and
the question-generation objectives of Appendix E Table 10).

They are generation-side priors that diversify the synthesised data, not evaluation labels:
each category asks for a different timing pattern (instant response, recall, counting,
patient waiting, narration), and the stage prompts quote its definition and objective.
"""

from __future__ import annotations

from dataclasses import dataclass

from streameval.synth.models import Category


@dataclass(frozen=True)
class TaskCategory:
    code: Category
    name: str
    behaviour: str  # Table 5, "Intended streaming behavior"
    objective: str  # Table 10, "Prompt objective" of question generation
    elicited: str  # Table 10, "Streaming behavior elicited"
    ovo_mode: str  # Table 5, the OVO-Bench mode it loosely exercises


CATEGORIES: dict[Category, TaskCategory] = {
    category.code: category
    for category in (
        TaskCategory(
            "IV",
            "Immediate Visual",
            "Respond as soon as evidence is visible in the current segment; describe what is "
            "happening right now (e.g. recognize an object, read a sign, identify an action).",
            "Generate questions about moment-specific visible details",
            "Ground responses in current visual evidence",
            "Real-Time Visual Perception",
        ),
        TaskCategory(
            "MD",
            "Memory-Dependent",
            "Recall a past event from the already-observed history when asked retroactively "
            '(e.g. "what color was the car that just passed?").',
            "Generate recall questions about earlier events",
            "Retrieve relevant past observations when queried later",
            "Backward Tracing",
        ),
        TaskCategory(
            "TA",
            "Temporal Aggregation",
            "Aggregate evidence across multiple segments before producing an answer (e.g. "
            "counting repeated actions, summarizing a sequence of steps).",
            "Generate counting questions over repeated actions",
            "Accumulate evidence across repeated events",
            "Backward Tracing / Forward Active Responding",
        ),
        TaskCategory(
            "AM",
            "Anticipatory Monitoring",
            "Stay silent until a triggering visual cue appears, then respond promptly (e.g. "
            "alert when a specific event begins, raise a clue-based causal answer).",
            "Generate questions about hidden targets or future reveals",
            "Wait until visual evidence becomes verifiable",
            "Forward Active Responding",
        ),
        TaskCategory(
            "DED",
            "Dynamic Event Description",
            "Continuously describe an unfolding event with appropriately spaced updates (e.g. "
            "narrate a procedure as it progresses), exercising both Silent restraint between "
            "updates and timely responses at salient transitions.",
            "Generate questions about sequential steps or procedures",
            "Report meaningful progress in evolving activities",
            "Spans all three modes",
        ),
    )
}
