"""Prompt templates: how a task record becomes (prompt, target) text. EOS is appended at tokenisation.

With task.prompt_format=chat the prompt text becomes the user turn of the tokenizer's chat template
(`chat_messages`; adaspec.data.encoding applies the template) and the answer ends with the template's
end-of-turn token instead of EOS."""

from __future__ import annotations

MATH_INSTRUCTION = "\nAnswer the above question. First think step by step and then answer the final number.\n"
FINAL_ANSWER = "The final answer is: "


def math_prompt(question: str) -> str:
    """The official AdaSPEC GSM8K source template."""
    return question + MATH_INSTRUCTION


def math_target(answer: str) -> str:
    """The official AdaSPEC GSM8K target: the worked answer with '####' replaced by the final-answer phrase."""
    return answer.replace("####", FINAL_ANSWER)


CODE_TASK_INTRO = "You are an expert Python programmer, and here is your task: "
CODE_TESTS_INTRO = " Your code should pass these tests:\n\n"
CODE_BEGIN = "[BEGIN]\n"
CODE_DONE = "[DONE]"


def code_prompt(text: str, tests: list[str]) -> str:
    """The MBPP prompt of the original paper (Austin et al., 2021), as used by common evaluation harnesses:

        You are an expert Python programmer, and here is your task: {text} Your code should pass these tests:

        {test 1}
        {test 2}
        {test 3}
        [BEGIN]

    The model writes the code after "[BEGIN]\\n" and ends it with "[DONE]" (see `code_target`).
    """
    return CODE_TASK_INTRO + text.strip() + CODE_TESTS_INTRO + "\n".join(tests) + "\n" + CODE_BEGIN


def code_target(code: str) -> str:
    """The reference solution with Windows line ends made "\\n" (tabs are kept), then "\\n[DONE]"."""
    return code.replace("\r\n", "\n").rstrip() + "\n" + CODE_DONE


def chat_messages(prompt: str) -> list[dict[str, str]]:
    """The conversation an instruct model is asked: the task's prompt as one user turn (the trailing
    newline that leads into a plain-text answer is dropped: the assistant header follows instead)."""
    return [{"role": "user", "content": prompt.rstrip()}]
