import Foundation
import NIOConcurrencyHelpers

/// The `Date` header's value (RFC 9110's IMF-fixdate), made at most once a second.
enum HTTPDate {
    private static let cache = NIOLockedValueBox<(second: Int, text: String)>((-1, ""))

    static func now() -> String {
        let second = time(nil)
        return cache.withLockedValue { cached in
            if cached.second == second { return cached.text }
            var t = second
            var parts = tm()
            gmtime_r(&t, &parts)
            let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
            let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
            func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
            let text =
                "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(1900 + parts.tm_year) "
                + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
            cached = (second, text)
            return text
        }
    }
}
