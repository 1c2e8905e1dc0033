"""The conversation a stream becomes, in ChatML (the Qwen-VL family's chat format).

A session is one growing conversation, appended piece by piece, never re-rendered:

    [<|im_start|>system\n{system}<|im_end|>\n]<|im_start|>user\n      preamble
    Frame at 5s:<|vision_start|><|image_pad|>...<|vision_end|>         one per frame
    {question or instruction prompt; the standby prompt at a first step before either}
    <|im_end|>\n<|im_start|>assistant\n                                 a decision is due
    {answer, or the wait word}
    <|im_end|>\n<|im_start|>user\n                                      back to watching

Every decision closes the user turn and the answer reopens it, so the model sees its own
earlier answers (and silences) in context. Frames are laid out as the Qwen chat template
lays out an image after a text label, and the question wording is the one the other chat
adapters use (adapters/chat_prompts.py), so native and rebuilt-history runs are comparable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streameval.adapters import chat_prompts as prompts

TURN_END = "<|im_end|>"
USER_TURN = "<|im_start|>user\n"
ASSISTANT_TURN = TURN_END + "\n<|im_start|>assistant\n"
AFTER_ANSWER = TURN_END + "\n" + USER_TURN

INSTRUCTION_PROMPT = (
    "You are watching the stream with this instruction: {instruction}\n"
    "After every new frame, if the instruction calls for a response at that moment, give it "
    "in one short sentence. Otherwise reply with exactly {wait} and nothing else.\n"
)
# The frame-level protocol asks for decisions before any question or instruction: the
# first such step tells the model how to pass.
STANDBY_PROMPT = (
    "You are watching a live video stream, one frame at a time, and may be asked something "
    "at any moment. Until there is something to respond to, reply to each frame with exactly "
    "{wait} and nothing else."
)


@dataclass(frozen=True)
class ChatFormat:
    system_prompt: str | None
    frame_label: str | None  # fields: {t}, {index} (the frame's position in the session)
    qa_prompt: str  # fields: {t}, {question}, {options}
    open_qa_prompt: str  # fields: {t}, {question}
    instruction_prompt: str  # fields: {t}, {instruction}, {wait}
    standby_prompt: str  # fields: {wait}
    wait_word: str

    def preamble(self) -> str:
        if self.system_prompt is None:
            return USER_TURN
        return f"<|im_start|>system\n{self.system_prompt}{TURN_END}\n{USER_TURN}"

    def label(self, t: float, index: int) -> str:
        """The text before a frame's image block."""
        return "" if self.frame_label is None else self.frame_label.format(t=t, index=index)

    def question(self, t: float, text: str, options: Sequence[str]) -> str:
        """The question, then the assistant turn the answer is generated into."""
        asked = prompts.qa_prompt(self.qa_prompt, self.open_qa_prompt, t, text, options)
        return asked + ASSISTANT_TURN

    def instruction(self, t: float, text: str) -> str:
        """A monitoring instruction joins the user turn; steps then ask for decisions."""
        return self.instruction_prompt.format(t=t, instruction=text, wait=self.wait_word)

    def first_standby_step(self) -> str:
        """The first decision asked before any task: how to pass, then the assistant turn."""
        return self.standby_prompt.format(wait=self.wait_word) + ASSISTANT_TURN
