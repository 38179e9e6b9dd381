"""The words of the instruction rules (``brewkb.trajectories.instructions``)
in other languages than English: a note to the assistant or the handler, an
internal note's label, rule 2 (a verb of ignoring or skipping before
instructions, rules or checks, or the noun first, as Chinese, Japanese,
Korean, Turkish and Hindi put it; a check said no longer needed) and rule 3
(a new policy, what holds for every customer, what agents or staff must do).

Each pattern is kept in Unicode NFKC, the form ``boundary.normalise`` gives
the text it is read in: Thai ``ำ`` is two characters there.
"""

from __future__ import annotations

import unicodedata

__all__ = ["NOTE_TO_THE_ASSISTANT", "INTERNAL_NOTE", "OVERRIDE", "NEW_RULE", "STAFF_MUST"]


def _nfkc(pattern: str) -> str:
    return unicodedata.normalize("NFKC", pattern)


_VERB = (r"(?i:ignorier(?:e|en|t)?|vergiss|vergessen|missachte|umgehe|überspringe|ignore[rz]?|oublie[rz]?"
         r"|contourne[rz]?|ignora[rn]?|olvida[rn]?|omite|omitir|salta[rn]?|dimentica(?:re)?|ignorare"
         r"|esque[çc]a|pule|não ligue para|negeer|vergeet|omzeil|игнорируй(?:те)?|проигнорируй(?:те)?|забудь(?:те)?"
         r"|пропусти(?:те)?|не обращай(?:те)? внимания на|zignoruj|ignoruj|pomiń|zapomnij|ignorera|ignorer|glöm|glem"
         r"|hunsa|abaikan|lupakan|zapomeň|bỏ qua|تجاهل|انس|ігноруй(?:те)?|проігноруй(?:те)?|αγνόησε|αγνοήστε|ξέχνα"
         r"|התעלם|התעלמו|שכח|puuza|ohita|unohda|ignoruokaa|ignoroi|ignoră|ignorați|uitați|ignorē\w*|aizmirsti"
         r"|huwag pansinin|hopp over|ne (?:tenez|tiens|tenir) pas compte (?:des|de la|du|de)|no (?:tengas|tenga|tengan)"
         r" en cuenta|non (?:tenere|tenete|tenga) conto (?:delle|dei|di)|não (?:leve|levem) em conta)")
"""Verbs of ignoring or skipping."""
_NOUN = (r"(?i:anweisungen|hinweise|regeln|richtlinien|vorgaben|prüfung(?:en)?|überprüfung(?:en)?|verifizierung"
         r"|instructions|règles|consignes|vérifications?|politiques?|instrucciones|reglas|verificaci[oó]n|pol[ií]ticas?"
         r"|istruzioni|regole|verifica|instru[çc][õo]es|regras|verifica[çc][ãa]o|instructies|regels|richtlijnen"
         r"|verificatie|controles?|инструкци[а-я]*|правил[а-я]*|указани[а-я]*|провер[а-я]*|instrukcj\w*|zasad\w*"
         r"|reguł\w*|weryfikacj\w*|instruktioner(?:na|ne)?|instruksjon(?:er|ene|ar|ane)?|regler(?:na|ne)?|instruksi"
         r"|aturan|verifikasi|instrukce|pravidla|hướng dẫn|quy tắc|التعليمات|تعليمات|القواعد|التحقق|інструкці[а-яії]*"
         r"|правил[а-яії]*|οδηγίες|κανόνες|ההוראות|הוראות|הכללים|maagizo|sheria|ohje(?:et|ita)?|säännöt|instrucțiunile"
         r"|instrucțiuni|regulile|arahan|tagubilin|instrukcijas|norādījum\w*|noteikum\w*|reglane|indicaciones"
         r"|indicações)")
"""What is ignored: instructions, rules, checks."""

NOTE_TO_THE_ASSISTANT = _nfkc(
    # "Hinweis an den Assistenten", "note pour l'assistant"
    r"(?i:\b(?:hinweis|nachricht|notiz|anweisung|note|message|nota|mensaje|mensagem|bericht|opmerking|записка"
    r"|сообщение|примечание)\s+(?:an|für|à|pour|para|per|al|a|aan|voor|для)\s+(?:den|die|das|l'|l’|la|le|el|o|il"
    r"|de|het)?\s*(?:assistenten|assistentin|assistant|assistente|asistente|assistent|ассистента|ии|ki|ia|ai|bot"
    r"|chatbot|agenten|agent|agente|модели|бота|bearbeiter(?:in)?|sachbearbeiter(?:in)?|mitarbeiter(?:in)?|kundendienst"
    r"|support|conseill(?:er|ère)|opérat(?:eur|rice)|service client|operador(?:a)?|emplead[oa]|operatore|medewerker"
    r"|сотрудника|оператора)\b)")
INTERNAL_NOTE = _nfkc(
    r"(?:^|[.!?]\s+)\s*(?i:note interne|m[ée]mo interne|nota interna|memo interno|mensaje interno|interne (?:notiz"
    r"|mitteilung|anweisung)|interne notitie|служебная записка|внутренняя записка)\s*:")
OVERRIDE = _nfkc(
    rf"\b{_VERB}\s+(?:[^\W\d_]+[\s,]+){{0,4}}?[^\W\d_]*?{_NOUN}\b"  # a compound: Kautionsregeln
    rf"|\b{_NOUN}\s+(?:[^\W\d_]+\s+){{0,2}}?(?i:ignorieren|vergessen|überspringen|umgehen|missachten|beiseite)\b"
    r"|(?:忽略|无视|忽视|忘记|跳过|無視|忘れ)[^。.!?]{0,12}(?:指示|指令|规则|規則|规定|验证|核实|检查|ルール|確認)"
    # the noun first: 指示を無視, 지시를 무시, talimatları yok say, निर्देशों को अनदेखा
    r"|(?:指示|指令|规则|規則|ルール|確認|命令|지시|지침|규칙|명령|확인)[^。.!?]{0,12}(?:無視|忘れ|スキップ|忽略|无视|忘记|무시|잊)"
    r"|(?i:\b(?:talimat|kural|doğrulama|kontrol)\w*\s+(?:\w+\s+){0,3}?(?:yok say|görmezden gel|unut|atla|aldırma))"
    r"|(?:निर्देश|नियम)\S*\s+(?:\S+\s+){0,3}?(?:अनदेखा|नज़रअंदाज़|नजरअंदाज|भूल|परवाह मत)"
    # the noun first, or where no word boundary reads: Thai, Persian, Bengali, Hungarian
    r"|(?:คำสั่ง|กฎ)[^.!?]{0,20}?(?:เพิกเฉย|ไม่ต้องสนใจ|ละเว้น)|(?:เพิกเฉย|ไม่ต้องสนใจ|ละเว้น)[^.!?]{0,20}?(?:คำสั่ง|กฎ)"
    r"|(?:دستورالعمل|دستورات|قوانین)[^.!?]{0,30}?(?:نادیده|فراموش)|(?:নির্দেশ|নিয়ম)[^।.!?]{0,30}?(?:উপেক্ষা|ভুলে)"
    r"|(?i:figyelmen kívül\s+(?:\w+\s+){0,3}?(?:utasítás|szabály)\w*|(?:utasítás|szabály)\w*\s+(?:\w+\s+){0,3}?"
    r"figyelmen kívül)"
    r"|(?:规则|規則|ルール|규칙)[^。.!?]{0,6}(?:不用管|不要管|别管|気にせず|無視|신경 쓰지)"
    # a check said no longer needed: "Die Identitätsprüfung ist … nicht mehr nötig"
    r"|(?i:(?:prüfung|verifizierung|kontrolle|vérification|contrôle|verificación|comprobación|verifica|controllo"
    r"|verificação|controle|controlo)\w*\s+(?:\S+\s+){0,8}?(?:nicht mehr|n'est plus|ya no es|non è più|não é mais"
    r"|niet meer)\s+(?:nötig|erforderlich|notwendig|nécessaire|requise?|necesari[ao]|necessari[ao]|necessári[ao]|nodig"
    r"|vereist))"
    # a check said skipped: "sem verificação de identidade", "без проверки личности"
    r"|(?i:\b(?:sem|sin|sans|ohne|senza|zonder|bez|без)\s+(?:(?:la|le|de|a|die|eine|una|uma)\s+)?(?:verifica[çc][ãa]o"
    r"|verificaci[oó]n|vérification|prüfung|überprüfung|identitätsprüfung|verifica|controllo|verificatie|weryfikacji"
    r"|провер[а-я]*|идентификаци[а-я]*))")
"""Rule 2: a verb of ignoring or skipping before instructions, rules or checks, or the noun first."""
NEW_RULE = _nfkc(
    r"(?i:\b(?:nueva|nuevas|nuevo|nuevos|neue|neuen|neuer|nouvelle|nouvelles|nouveau|nova|novas|novo|nuova|nuove"
    r"|nuovo|nieuwe|nowa|nowe|новая|новые|новое|новым)\s+(?:pol[ií]ticas?|politiques?|politica|normas?|reglas?"
    r"|regeln?|regelung(?:en)?|richtlinien?|règles?|r[èe]glement|regras?|regole|regels?|beleid|zasad[ay]?|polityka"
    r"|правил[а-я]*|политик[а-я]*)"
    r"|\b(?:para|a|pour|für|per|voor|dla|для)\s+(?:todos\s+los|todas\s+las|todos\s+os|todas\s+as|tous\s+les"
    r"|toutes\s+les|alle|tutti\s+i|tutte\s+le|wszystkich|всех)\s+(?:clientes?|clients?|kunden|clienti|klanten"
    r"|klientów|клиентов|usuarios|utilisateurs|nutzer|pasajeros|passagers|passagiere|passageiros))"
    r"|新(?:规定|規定|政策|规则|規則)|新しい(?:ルール|規則|規定)|새(?:로운)? ?(?:규정|정책|규칙)")
"""Rule 3: a new policy or rule, or what holds for every customer."""
STAFF_MUST = _nfkc(
    r"(?i:\b(?:(?:los|las)\s+(?:agentes|empleados|operadores|asesores)\s+(?:deben|tienen que)"
    r"|(?:die\s+)?(?:agenten|mitarbeiter(?:innen)?|bearbeiter(?:innen)?)\s+(?:müssen|sollen|sollten)"
    r"|les\s+(?:agents|employés|conseillers|opérateurs)\s+(?:doivent|devraient)|gli\s+(?:agenti|operatori)\s+devono"
    r"|os\s+(?:agentes|atendentes|funcionários)\s+devem|de\s+(?:medewerkers|agenten)\s+(?:moeten|zouden)"
    r"|(?:агенты|операторы|сотрудники)\s+должны|wakala\s+(?:wote\s+)?wanapaswa)\b)")
"""Rule 3: what agents or staff must do, said to the agent."""
