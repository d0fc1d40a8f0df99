/// Google's `google-datetime` (RFC 3339: `2026-11-27T13:58:01.123456Z`, fractional digits optional, `Z` or an offset) to
/// milliseconds since 1970, read by hand: Foundation's ISO8601DateFormatter sets up ICU's calendar and locale on every
/// use, which was a quarter of verification's CPU under a burst of Google Play pushes (each carries a `publishTime`, and
/// each purchase Google answers carries its times). Digits finer than a millisecond are dropped, as Foundation did.
public enum GoogleDateTime {
    public static func milliseconds(_ text: String) -> Int64? {
        let b = Array(text.utf8)
        func digits(_ from: Int, _ count: Int) -> Int64? {
            guard from + count <= b.count else { return nil }
            var n: Int64 = 0
            for i in from..<(from + count) {
                guard (48...57).contains(b[i]) else { return nil }
                n = n * 10 + Int64(b[i] - 48)
            }
            return n
        }
        // YYYY-MM-DDTHH:MM:SS
        guard b.count >= 20, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: "t"),
            b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"),
            let year = digits(0, 4), let month = digits(5, 2), let day = digits(8, 2), let hour = digits(11, 2), let minute = digits(14, 2),
            let second = digits(17, 2), (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day), hour < 24, minute < 60,
            second < 61
        else { return nil }
        var i = 19
        var millis: Int64 = 0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            let start = i
            while i < b.count, (48...57).contains(b[i]) {
                if i - start < 3 { millis = millis * 10 + Int64(b[i] - 48) }
                i += 1
            }
            guard i > start, i - start <= 9 else { return nil }
            for _ in min(i - start, 3)..<3 { millis *= 10 }
        }
        var offsetSeconds: Int64 = 0
        guard i < b.count else { return nil }
        if b[i] == UInt8(ascii: "Z") || b[i] == UInt8(ascii: "z") {
            i += 1
        } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            guard i + 6 == b.count, b[i + 3] == UInt8(ascii: ":"), let h = digits(i + 1, 2), let m = digits(i + 4, 2), h < 24, m < 60 else {
                return nil
            }
            offsetSeconds = (h * 3600 + m * 60) * (b[i] == UInt8(ascii: "+") ? 1 : -1)
            i += 6
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let seconds = daysFromCivil(year: year, month: month, day: day) * 86_400 + hour * 3600 + minute * 60 + min(second, 59) - offsetSeconds
        return seconds * 1000 + millis
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
