from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from brewkb.config import parse_config
from brewkb.errors import ConfigError
from brewkb.lint import lint_paths
from brewkb.llm.offline import OfflineBackend
from brewkb.stages.integrate import integrate
from brewkb.trajectories.schema import Outcome, Trajectory
from brewkb.trajectories.scrub import Scrubber, scrubber_of
from tests.conftest import recipe_text
from tests.test_lint import run_cli


@pytest.mark.parametrize(("text", "kind"), [
    ("write to jane.doe+x@mail.example.org today", "email"),
    ("call me on +1 415-555-0134 please", "phone"),
    ("call (415) 555-0134", "phone"),
    ("card 4111 1111 1111 1111 expires", "card_number"),
    ("card 4111111111111111 expires", "card_number"),
    ("pay with credit_card_4421486", "payment_id"),
    ("pay with gift_card_1234567", "payment_id"),
    ("I am mia_li_3668.", "user_id"),
    ("cancel order #W5489570 now", "order_id"),
    ("Hi, I'm Rosa Tanaka and I need help", "name"),
    ("my zip code is 83151.", "zip"),
    ("cancel my flights in reservation ID SI5UKW, please", "booking_code"),
    ("the confirmation number is 1N99U6.", "booking_code"),
    ("changes to my upcoming flight in reservation HXDUBJ.", "booking_code"),
    ("card ending 1111, cvv 123, thanks", "security_code"),
    ("the security code is 456.", "security_code"),
    ("my PIN 1234 works", "security_code"),
    ("DOB 1980-02-03 as on file", "birth_date"),
    ("my date of birth is March 3, 1980.", "birth_date"),
    ('curl -H "Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0" https://api', "secret"),
    ("use token: tok_live_abcdefghij123 here", "secret"),
    ("set api_key=plainlongsecretvalue123456 and go", "secret"),
    ("use the key sk-live-brewair-refund-override-key now", "secret"),  # a key's shape, low entropy or not
    ("the token ghp_aaaaaaaaaaaaaaaaaaaaaaaa leaked", "secret"),
    ("I was born on the 3rd of March 1980.", "birth_date"),
    ("My number is 06 12 34 56 78 in Paris.", "phone"),
    ("my phone is four one five, five five five, zero one three two thanks", "spelled_number"),
    ("My social is 078 05 1120.", "ssn"),
    ("Je m'appelle Amélie Dubois et je veux annuler.", "name"),
    ("Hola, me llamo Lucía Fernández y quiero cancelar.", "name"),
    ("Error: refund held; the duty manager Marcus Webb must approve", "name"),
    ("Booking is under Kwame Mensah-Boateng, thanks.", "name"),
    ("reservation locked by admin Lucía Fernández Ortega today", "name"),
    ("Name: Priya Raman, I need to cancel", "name"),
    ("It's Priya Raman, I want to cancel", "name"),
    ("Thanks for the help. Regards, Olusegun Adebayo-Okafor", "name"),
    ("my aadhaar is 2345 6789 0123, please cancel", "number"),
    ("my CPF is 123.456.789-09 ok", "number"),
    ("my phone: 4-1-5-5-5-5-0-1-3-2 thanks", "number"),
    ("my employee id is E555123.", "id"),
    ("my tax id 12-3456789", "number"),
    ("my driver's licence is D1234-56789-01234", "id"),
    ("my passport's X1234567", "passport"),
    ("Reisepassnummer C01X00T47", "passport"),
    ("my birthday's 3 March 1980", "birth_date"),
    ("DOB: 03-Mar-1980", "birth_date"),
    ("Sure - d.o.b. 1999-02-18.", "birth_date"),
    ("born 3rd March '80", "birth_date"),
    ("Mein Geburtsdatum ist 03.03.1980", "birth_date"),
    ("fecha de nacimiento 03/03/1980", "birth_date"),
    ("my email is priya.raman@gmail and I need help", "email"),
    ("my email is priya@müller.de", "email"),
    ("ship it to 1600 Broadway, New York, NY 10019", "address"),
    ("my address is Keizersgracht 123, 1015 CJ Amsterdam", "address"),
    ("my address is Hauptstr. 5, 10115 Berlin", "address"),
    ("my address is 東京都港区六本木6-10-1", "address"),
    ("postgres connection admin:hunter2@db", "credentials"),
    ("login: jsmith / hunter2hunter2", "login"),
    ("my pw is Xy7&3abc", "password"),
    ("my laptop MAC 00:1A:2B:3C:4D:5E", "mac_address"),
    ("my IPv6 is 2001:db8:85a3::8a2e:370:7334", "ip_address"),
    ("the office is at 10.0.0.5 today", "ip_address"),
    ("I'm at 37.7749, -122.4194 right now", "location"),
    ("My password is: sunshine", "password"),
    ("пароль: qwerty", "password"),
    ("My seed phrase is witch collapse practice feed shame open despair", "passphrase"),
    ("Refund to 0x742d35Cc6634C0532925a3b844Bc454e4438f44e.", "wallet"),
    ("The code they texted me is 482 913.", "security_code"),
    ("Меня зовут Иван Петров.", "name"),
    ("Mijn naam is Jan de Vries.", "name"),
    ("Good morning, I'm Mei-Ling Chen.", "name"),
    ("Hey - Sione Taufa speaking.", "name"),
    ("Patient: Hamid Rezaei.", "name"),
    ("안녕하세요, 김민준입니다.", "name"),
    ("佐藤花子と申します。", "name"),
    ("佐藤花子です.英語ですみません.", "name"),
    ("ผมชื่อสมชาย ครับ", "name"),
    ("मेरा नाम राहुल शर्मा है", "name"),
    ("Իմ անունը Արամ Պետրոսյան", "name"),
    ("我叫王小明。", "name"),
    ("please upgrade Noah Hernandez to business", "full_name"),
    ("для Иван Петров", "full_name"),
    ("my national insurance number is QQ 12 34 56 C.", "id"),
    ("the car's registration is AB12 CDE", "plate"),
    ("book my car JO84 PBF into a shop", "plate"),
    ("my car 品川 929 あ 27-17 was hit", "plate"),
    ("we settled with the other driver (MH 65 FU 9414).", "plate"),
    ("제 차는 29가 7978 입니다", "plate"),
    ("my licence plate is KA 01 AB 1234", "plate"),
    ("the key is AKIA IOSF ODNN 7EXA MPLE.", "secret"),
    ("here it is: s k - p r o j - a b c 1 2 3 d e f 4 5 6", "secret"),
    ("token = supersecretvalue", "secret"),
    ("my API key is abcd-efgh-ijkl-mnop, use it", "secret"),
    ("My card ends in 4242 and expires 04/27.", "card_expiry"),
    ("Mi hijo Santiago recogerá el pedido.", "name"),
    ("If I'm out, give it to roommate Destiny.", "name"),
    ("If I'm out, give it to abuela Rosa.", "name"),
    ("The second contact is my mother-in-law Lakshmi.", "name"),
    ("My twins Chidi and Ada will collect it.", "name"),
    ("Claim 7: طارق حداد will drop the car off.", "full_name"),
    ("Please add cover. נועה לוי is nervous about driving.", "full_name"),
    ("Please cancel. I'm HIV positive and can't fly now.", "health"),
    ("She tested positive for measles last week.", "health"),
    ("Book me an automatic; I have epilepsy so I can't drive a manual.", "health"),
    ("The discharge letter confirms osteoarthritis.", "health"),
    ("Ich habe Epilepsie und Diabetes.", "health"),
    ("I'm registered blind, please send it in large print.", "health"),
    ("Please move us; my son has a heart condition.", "health"),
    ("I use a wheelchair, I need an accessible room.", "health"),
    ("She's 7 months pregnant and flying home.", "health"),
    ("Claimant reports a broken femur.", "health"),
    ("Claimant reports long COVID.", "health"),
    ("I can't carry bags: I broke my wrist last week.", "health"),
    ("Pause my plan, I can't cycle until my ankle heals.", "health"),
    ("Oat milk please, she's lactose intolerant.", "health"),
    ("Estoy embarazada de siete meses.", "health"),
    ("I'm eight months sober from alcohol addiction.", "health"),
    ("I tore my ACL skiing.", "health"),
    ("I'm on sertraline and quetiapine.", "medication"),
    ("I need a refill of my Truvada today.", "medication"),
    ("My doctor switched me off Lipitor.", "medication"),
])
def test_each_default_pattern_becomes_its_placeholder(text: str, kind: str) -> None:
    scrubbed = Scrubber.build().text(text)
    assert f"<{kind}>" in scrubbed
    assert scrubbed.split(f"<{kind}>")[0] == text[: len(scrubbed.split(f"<{kind}>")[0])]  # context kept
    assert Scrubber.build().find(scrubbed) == []


def test_a_name_with_letters_beyond_ascii_is_replaced_whole() -> None:
    assert Scrubber.build().text("I am Tomasz Wiśniewski, a patron") == "I am <name>, a patron"


@pytest.mark.parametrize(("text", "scrubbed"), [
    ("write to zebediah dot quill at example dot org", "write to <email>"),
    ("I live at 742 Evergreen Terrace, Springfield, IL 62704 since May", "I live at <address> since May"),
    ("send it to 12 Baker Street, London NW1 6XE today", "send it to <address> today"),
    ("I live at Flat 4, 17 Rosewood Mews, Leeds LS1 4AP.", "I live at Flat 4, <address>."),
    ("Send it to Calle Mayor 12, 28013 Madrid please.", "Send it to <address> Madrid please."),
])
def test_an_address_and_an_obfuscated_email_are_replaced_whole(text: str, scrubbed: str) -> None:
    assert Scrubber.build().text(text) == scrubbed


def test_a_value_a_pattern_knew_by_its_mark_or_its_words_is_replaced_where_it_stands_bare() -> None:
    traj = _traj("Order #W9988123 (W9988123)", [
        {"role": "user", "content": "I am Jane Doe; the order is #W9988123, reservation ID SI5UKW"},
        {"role": "assistant", "content": "Jane Doe, order W9988123 and SI5UKW are found."}])
    out = Scrubber.build().trajectory(traj)
    assert out.task == "Order <order_id> (<order_id>)"
    assert out.messages[1]["content"] == "<name>, order <order_id> and <booking_code> are found."


def test_an_address_written_with_an_ideographic_full_stop_is_an_address() -> None:
    from brewkb.trajectories.boundary import normalise
    assert Scrubber.build().text(normalise("mail refunds@brewair。com today")) == "mail <email> today"


def test_ordinary_numbers_and_codes_are_left_alone() -> None:
    text = ("Flight HAT136 on 2024-05-20 costs 250 dollars for 3 bags; item 100829. I'm happy, This Is fine. "
            "One or two, three four five: six of one. Calle Mayor is closed. I booked 2 seats on 05 12 flights. "
            "I am socially 100 percent sure. The booking is under ID SI and the agent Then left. "
            "My reservation is NOT changed; the booking CANCELLED. The token is expired, the bearer of the card "
            "asks for a PIN code reset for 3 cards. From New York to Las Vegas on the West Coast in Basic Economy, "
            "paid by Gift Card; the api key is invalid. I am a big fan of the new app and go to the zoo on my way "
            "home. Flight UA 123 on May 5 at 9 am from SFO to JFK with 2 bags. مرحبا، أريد إلغاء حجزي من فضلك. "
            "The word شكرا means thanks. My account is disabled and the feature is disabled; I had a stroke of "
            "luck. I need the diagnosis code for the hypnosis session, and hearing aids for the visual aids team. "
            "The academia team and the Kuwaitis watched a metamorphosis. COVID-related cancellations are refunded. "
            "Alcoholic drinks are free, and a refill of coffee.")
    assert Scrubber.build().text(text) == text


def _traj(task: str, messages: list[dict], success: bool = True) -> Trajectory:
    return Trajectory(task_id="t1", task=task, messages=tuple(messages), outcome=Outcome(success, float(success)))


def _call(name: str, args: dict, result: str, n: int) -> list[dict]:
    return [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": result}]


def test_values_named_by_tool_schema_keys_are_scrubbed_everywhere() -> None:
    user = json.dumps({"name": {"first_name": "Omar", "last_name": "Rossi"}, "reservations": ["ZFA04Y"]})
    traj = _traj("You are omar. Cancel reservation ZFA04Y for Omar Rossi.", [
        {"role": "user", "content": "Hi, I am Omar Rossi, booking ZFA04Y please"},
        *_call("get_user_details", {"user_id": "omar_r"}, user, 1),
        *_call("cancel_reservation", {"reservation_id": "ZFA04Y"}, "{\"status\": \"cancelled\"}", 2),
    ])
    out = Scrubber.build().trajectory(traj)
    text = json.dumps([out.task, list(out.messages)])
    for secret in ("ZFA04Y", "Omar", "Rossi", "omar_r"):
        assert secret not in text
    # "Omar Rossi" is also the name the user gave ("I am Omar Rossi"): the whole is replaced as one
    assert out.task == "You are omar. Cancel reservation <reservation_id> for <name>."
    assert json.loads(out.messages[3]["tool_calls"][0]["function"]["arguments"]) == {"reservation_id": "<reservation_id>"}
    assert out.id == traj.id  # the same episode, told without names


def test_one_scrubber_gives_each_trajectory_its_own_values_for_the_same_text() -> None:
    scrubber = Scrubber.build()
    said = "Thanks ZFA04Y, write to omar@mail.example.org"
    first = scrubber.text(said, {"ZFA04Y": "reservation_id"})
    assert first == "Thanks <reservation_id>, write to <email>"
    assert scrubber.text(said) == "Thanks ZFA04Y, write to <email>"  # a text seen before, with other values
    assert scrubber.text(said, {"ZFA04Y": "ticket_id"}) == "Thanks <ticket_id>, write to <email>"
    assert scrubber.text(said, {"ZFA04Y": "reservation_id"}) == first


def test_configured_patterns_and_keys_are_added_and_bad_regex_names_its_key() -> None:
    config = parse_config('[scrub]\npatterns = { employee_id = "EMP-\\\\d{6}", phone = "", number = "" }\nkeys = ["badge"]\n')
    scrubber = scrubber_of(config.scrub)
    assert scrubber.text("EMP-123456 at 415-555-0134") == "<employee_id> at 415-555-0134"
    traj = _traj("badge B-77 lost", _call("report_badge", {"badge": "B-77"}, "ok", 1))
    assert scrubber.trajectory(traj).task == "badge <badge> lost"
    with pytest.raises(ConfigError, match=r"scrub\.patterns\.bad: not a valid regex"):
        Scrubber.build({"bad": "(["})


def test_placeholders_survive_integration() -> None:
    traj = Scrubber.build().trajectory(_traj("My email is ann@example.com, cancel order #W1234567", [
        *_call("find_user_by_email", {"email": "ann@example.com"}, "{\"user_id\": \"ann_lee_1234\"}", 1),
        *_call("cancel_order", {"order_id": "#W1234567", "reason": "no longer needed"}, "{\"ok\": true}", 2),
    ]))
    backend = OfflineBackend()
    insights = asyncio.run(backend.reflect(traj))
    recipes = asyncio.run(integrate(backend, "cancel-order", "cancel order", (), insights * 2, None))
    text = recipes[0].body
    assert "<email>" in text and "<order_id>" in text
    assert "ann@example.com" not in text and "W1234567" not in text


def test_lint_warns_about_personal_data_in_any_recipe(tmp_path: Path) -> None:
    body = "## When to use\n\nFor example: I am mia_li_3668, mail mia@example.com.\n\n## How to perform\n\n1. Do it.\n"
    (tmp_path / "refund.md").write_text(recipe_text("refund", body=body))
    problems = lint_paths([tmp_path])
    kinds = {(p.severity, p.line, p.message.split("(")[1].split(")")[0]) for p in problems
             if p.message.startswith("looks like personal data")}
    assert kinds == {("warning", 8, "user_id"), ("warning", 8, "email")}
    assert [(p.line, p.message) for p in problems if "id:" in p.message] == [(8, "looks like an id: 'mia_li_3668'")]
    result = run_cli(tmp_path, "lint", "refund.md")
    assert result.returncode == 0  # a warning, not an error
    assert "refund.md:8: warning: looks like personal data (email): 'mia@example.com'" in result.stdout
    clean = body.replace("mia_li_3668", "<user_id>").replace("mia@example.com", "<email>").replace(
        "1. Do it.", "1. Do it. My password is <password> Email me after.")  # a placeholder is no value
    (tmp_path / "refund.md").write_text(recipe_text("refund", body=clean))
    assert lint_paths([tmp_path]) == []


def test_a_name_a_tool_gave_is_scrubbed_however_the_user_cases_it() -> None:
    traj = _traj("Move my visit", [{"role": "user", "content": "hi its oluwaseun  adeyemi, move my visit"},
                                   *_call("find_patient", {"last_name": "Adeyemi"},
                                         json.dumps({"patient_id": "PT-761308", "name": "Oluwaseun Adeyemi"}), 1),
                                   {"role": "user", "content": "I will come. OLUWASEUN ADEYEMI"}])
    out = Scrubber.build().trajectory(traj)
    assert out.messages[0]["content"] == "hi its <name>, move my visit"
    assert out.messages[3]["content"] == "I will come. <name>"


def test_a_value_under_a_key_that_ends_in_a_personal_one_or_that_is_a_name_is_scrubbed_everywhere() -> None:
    policy = json.dumps({"vehicle_plate": "8717 NFZ", "home_postcode": "D04 Y2R8", "third_party": "Tomasz Kowalczyk",
                         "national_id": "PR 55 39 43 B", "excess": 250, "claim_type": "Collision Damage",
                         "account_holder": "Siobhán Ní Bhriain", "allergy_notes": "HIV positive, on ARVs",
                         "household": ["Wanjiru"], "service_health": "degraded", "drivers": ["Priya Raghunathan"],
                         "beneficiaries": [{"name": "Rangi Parata", "share": 100}], "tenant": "Sven de Vries"})
    traj = _traj("Open a claim", [
        {"role": "user", "content": "My car 8717 NFZ was hit near D04 Y2R8 by Tomasz Kowalczyk; my NI is PR 55 39 43 B"},
        *_call("get_policy", {"policy_number": "HRP-1"}, policy, 1),
        {"role": "user", "content": "I'm Siobhán Ní Bhriain, and Wanjiru can sign for it. The app was degraded."},
        {"role": "user", "content": "Rangi Parata gets it all; Priya Raghunathan drives; Sven de Vries rents it."}])
    text = json.dumps(list(Scrubber.build().trajectory(traj).messages), ensure_ascii=False)
    for value in ("8717 NFZ", "D04 Y2R8", "Tomasz", "Kowalczyk", "PR 55 39 43 B", "Siobhán", "HIV", "Wanjiru", "Vries",
                  "Rangi", "Raghunathan"):
        assert value not in text
    # what is no person's stays, and a service's health is no one's
    assert "Collision Damage" in text and "250" in text and "The app was degraded." in text


def test_the_name_of_a_record_of_things_is_no_persons() -> None:
    menu = json.dumps([{"item_id": "I-1203", "name": "Mango Lassi"}, {"station_id": "ST-0091", "name": "Lincoln Park"},
                       {"campus_id": "C-0042", "name": "Grace Hopper Campus"},
                       {"patient_id": "P-48213", "name": "Tomás Ó Briain"}], ensure_ascii=False)
    said = "Swap the Mango Lassi; I'm at Lincoln Park near Grace Hopper Campus. Tomás Ó Briain eats too."
    traj = _traj("Fix my order", [{"role": "user", "content": said}, *_call("get_items", {"q": "x"}, menu, 1)])
    out = Scrubber.build().trajectory(traj).messages
    assert out[0]["content"] == "Swap the Mango Lassi; I'm at Lincoln Park near Grace Hopper Campus. <name> eats too."
    assert [r["name"] for r in json.loads(out[2]["content"])] == ["Mango Lassi", "Lincoln Park", "Grace Hopper Campus",
                                                                   "<name>"]


def test_names_of_teams_places_and_products_are_no_persons() -> None:
    said = ("Regards, Travel Desk. It's Unlimited Plus that my daughter Galaxy has. Accounts Payable here. "
            "Is Lincoln Park near Morgan Hill? My password is not working. The agent told me parking is free.")
    records = json.dumps({"owner": "Finance Team", "requested_by": "Front Desk", "hotel": "The Palmer House Hilton",
                          "neighborhood": "Stanley Park", "plan": "Team", "manager": "Marcus Webb"})
    stay = json.dumps([{"rate_code": "AAA9", "name": "AAA Member Rate"},
                       {"reservation_id": "HB73100Q", "hotel": "Hotel Emma", "city": "Austin"}])
    traj = _traj("Book it", [{"role": "user", "content": said},
                             *_call("get_account", {"account": "x"}, records, 1),
                             {"role": "user", "content": "Is the Team plan right for Marcus?"},
                             *_call("get_rates", {"city": "Austin"}, stay, 2)])
    out = Scrubber.build().trajectory(traj)
    assert out.messages[0]["content"] == said
    assert json.loads(out.messages[2]["content"]) == {**json.loads(records), "manager": "<manager>"}
    assert out.messages[3]["content"] == "Is the Team plan right for <manager>?"  # a person's name, and only that
    # a rate's name is no person's, and a hotel's town is no one's home (an address's town is: test_trust)
    assert json.loads(out.messages[5]["content"]) == [{"rate_code": "<rate_code>", "name": "AAA Member Rate"},
                                                      {"reservation_id": "<reservation_id>", "hotel": "Hotel Emma",
                                                       "city": "Austin"}]
