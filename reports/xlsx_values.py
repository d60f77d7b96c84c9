"""Cached values for a workbook's formula cells. openpyxl writes a formula with an empty value, so a
reader that does not calculate (pandas, file previewers, mail clients) sees empty cells; this writes
the value the report computed beside each formula, as a spreadsheet program does after calculating.
Excel and LibreOffice still recalculate on open (openpyxl sets fullCalcOnLoad), so an edited price
recomputes as before.

    values = FormulaValues()
    values.put(ws, "C2", "=A2*B2", 6.0)
    xlsx = values.fill(buffer.getvalue(), wb.sheetnames)
"""

from __future__ import annotations

import io
import math
import re
import zipfile
from dataclasses import dataclass, field
from xml.sax.saxutils import escape


@dataclass
class FormulaValues:
    values: dict[tuple[str, str], object] = field(default_factory=dict)  # (sheet title, cell ref) -> computed value

    def put(self, ws, ref: str, formula, value) -> None:
        """Write `formula` (text, or an openpyxl ArrayFormula) into ws[ref] and remember the value it evaluates to."""
        ws[ref] = formula
        self.values[(ws.title, ref)] = value

    def fill(self, xlsx: bytes, sheet_titles: list[str]) -> bytes:
        """The saved workbook with each remembered value cached in its formula cell (openpyxl names
        worksheet parts sheet1.xml, sheet2.xml, ... in sheet order)."""
        by_part = {f"xl/worksheets/sheet{i}.xml": t for i, t in enumerate(sheet_titles, start=1)}
        src, out = zipfile.ZipFile(io.BytesIO(xlsx)), io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
            for item in src.infolist():
                data = src.read(item.filename)
                if item.filename in by_part:
                    data = self._fill_sheet(data.decode("utf-8"), by_part[item.filename]).encode("utf-8")
                dst.writestr(item, data)
        return out.getvalue()

    def _fill_sheet(self, xml: str, title: str) -> str:
        def cached(m: re.Match) -> str:
            ref, attrs, f = m.group(1), m.group(2) or "", m.group(3)  # f: the whole <f ...>...</f>, an array formula's attributes kept
            if (title, ref) not in self.values:
                return m.group(0)
            v = self.values[(title, ref)]
            if isinstance(v, bool):
                return f'<c r="{ref}"{attrs} t="b">{f}<v>{int(v)}</v></c>'
            if isinstance(v, (int, float)) and math.isfinite(v):
                return f'<c r="{ref}"{attrs}>{f}<v>{float(v)!r}</v></c>'
            text = "" if v is None or isinstance(v, float) else str(v)  # a non-finite number: an empty text, as IF(...,"") gives
            return f'<c r="{ref}"{attrs} t="str">{f}<v>{escape(text)}</v></c>'

        return re.sub(r'<c r="([A-Z]+[0-9]+)"((?: (?!t=)[a-z]+="[^"]*")*)>(<f(?: [a-z]+="[^"]*")*>.*?</f>)<v\s*/></c>', cached, xml)
