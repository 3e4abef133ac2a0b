"""The agent format: action parsing with feedback, coordinate mapping, the model image size."""

from __future__ import annotations

import pytest

from kubecua_trainer.rollout.agent import ParseError, parse_action, scale_coordinates, system_prompt


def test_code_block_is_parsed_to_its_code() -> None:
    reply = (
        "I will open the menu.\n```python\npyautogui.click(12, 34)\npyautogui.press('enter')\n```"
    )
    action = parse_action(reply)
    assert action.kind == "code"
    assert action.wire == "pyautogui.click(12, 34)\npyautogui.press('enter')"


@pytest.mark.parametrize("word", ["DONE", "FAIL", "WAIT"])
def test_special_words_end_the_reply(word: str) -> None:
    action = parse_action(f"The task is finished. {word}")
    assert action.kind == word
    assert action.wire == word


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I am thinking about it.", "no action found"),
        (
            "```python\nimport os\nos.system('rm -rf /')\n```",
            "os.system() is not an allowed action",
        ),
        ("```python\nx = 1\n```", "line 1 is not a function call"),
        ("```python\npyautogui.click(1,\n```", "the code does not parse (line 1"),
        ("```python\n```", "the code block is empty"),
        ("```python\npyautogui.click(1, 2)", "not closed"),
        (
            "```python\npyautogui.click(1, 2)\n```\n```python\npyautogui.click(3, 4)\n```",
            "found 2 code blocks",
        ),
        ("DONE, then I will click more", "no action found"),
    ],
)
def test_invalid_reply_gets_specific_feedback(reply: str, reason: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_action(reply)
    assert reason in err.value.feedback
    assert "Reply with one ```python code block" in err.value.feedback


def test_coordinates_map_from_model_image_to_screen() -> None:
    code = "pyautogui.moveTo(100, 50)\npyautogui.dragTo(x=10, y=20)\npyautogui.moveRel(-10, 5)"
    scaled = scale_coordinates(code, 2.0, 3.0).splitlines()
    assert scaled == [
        "pyautogui.moveTo(200, 150)",
        "pyautogui.dragTo(x=20, y=60)",
        "pyautogui.moveRel(-20, 15)",
    ]
    # text, keys and scroll amounts are not coordinates
    assert scale_coordinates("pyautogui.write('100')\npyautogui.scroll(5)", 2, 2).splitlines() == [
        "pyautogui.write('100')",
        "pyautogui.scroll(5)",
    ]


def test_system_prompt_names_the_action_space_and_size() -> None:
    text = system_prompt(1260, 720)
    assert "1260x720" in text
    assert "```python" in text
    assert all(word in text for word in ("DONE", "FAIL", "WAIT", "pyautogui"))
