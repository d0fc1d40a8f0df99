import Foundation
import Hummingbird
import IAPProtocol

/// The overview: today and the last 30 days of Production purchases, grants, refunds and revenue per currency (from
/// each purchase's own signed price; unpriced ones counted apart), subscriptions in force and what waits; the days as
/// server-drawn SVG bar charts with the numbers beside them.
extension ConsoleService {
    func overview(_ session: OperatorSession) async throws -> Response {
        let o = try await fulfillment.call(FulfillmentGetOverview.self, .init(adminToken: configuration.adminToken, days: 30))
        let today = o.days.last
        var currencies: [String: (today: Int64, month: Int64, daily: [Int64])] = [:]
        for (i, day) in o.days.enumerated() {
            for amount in day.revenue {
                var entry = currencies[amount.currency] ?? (0, 0, Array(repeating: 0, count: o.days.count))
                // Saturating: a sum past Int64 (not a real day's revenue) must not stop the page.
                entry.month = Self.add(entry.month, amount.milliunits)
                entry.daily[i] = Self.add(entry.daily[i], amount.milliunits)
                if i == o.days.count - 1 { entry.today = Self.add(entry.today, amount.milliunits) }
                currencies[amount.currency] = entry
            }
        }
        let labels = o.days.map { Self.day($0.dayStartMs) }
        let sum = { (path: KeyPath<OverviewDay, Int64>) in o.days.reduce(Int64(0)) { $0 + $1[keyPath: path] } }
        let data: [String: Any] = [
            "figures": [
                ["name": "Purchases", "id": "purchases", "today": today?.purchases ?? 0, "month": sum(\.purchases)],
                ["name": "Grants", "id": "grants", "today": today?.grants ?? 0, "month": sum(\.grants)],
                ["name": "Refunds", "id": "refunds", "today": today?.refunds ?? 0, "month": sum(\.refunds)],
                ["name": "Unpriced purchases (receipts)", "id": "unpriced", "today": today?.unpriced ?? 0, "month": sum(\.unpriced)],
            ],
            "revenue": currencies.keys.sorted().map { code -> [String: Any] in
                let c = currencies[code]!
                return [
                    "currency": code, "today": Self.money(c.today), "month": Self.money(c.month),
                    "chart": Self.barChart("Revenue per day (\(code))", c.daily.map { Double($0) / 1000 }, labels: labels),
                ]
            },
            "activeSubscriptions": o.activeSubscriptions, "parked": o.parkedNotifications, "waiting": o.waitingAtStores,
            "purchasesChart": Self.barChart("Purchases per day", o.days.map { Double($0.purchases) }, labels: labels),
            "refundsChart": Self.barChart("Refunds per day", o.days.map { Double($0.refunds) }, labels: labels),
        ]
        return page("overview", title: "Overview", data, session: session)
    }

    static func add(_ a: Int64, _ b: Int64) -> Int64 {
        let (sum, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? .max : .min) : sum
    }

    /// Milliunits as units with two decimals (Apple's prices are whole milliunits of the currency).
    static func money(_ milliunits: Int64) -> String {
        let cents = add(milliunits, milliunits >= 0 ? 5 : -5) / 10
        let whole = cents / 100, part = abs(cents % 100)
        return "\(whole).\(part < 10 ? "0" : "")\(part)"
    }

    static func day(_ ms: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "MM-dd"
        return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
    }

    /// A bar per value, drawn here as SVG (no script, no external asset), each bar titled with its day and value, the
    /// largest value written beside the axis. Only numbers and the given text (escaped) go into the markup.
    static func barChart(_ title: String, _ values: [Double], labels: [String]) -> String {
        let width = 600.0, height = 140.0, top = 20.0, bottom = 20.0
        let step = width / Double(max(values.count, 1)), largest = values.max() ?? 0
        let peak = largest > 0 ? largest : 1  // the scale; all zeros draw no bars
        var out = [
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 \(Int(width) + 60) \(Int(height))\" role=\"img\" aria-label=\"\(escape(title))\">",
            "<text x=\"0\" y=\"14\" font-size=\"12\">\(escape(title))</text>",
            "<text x=\"\(Int(width) + 4)\" y=\"\(Int(top) + 10)\" font-size=\"10\">\(format(largest))</text>",
            "<line x1=\"0\" y1=\"\(Int(height - bottom))\" x2=\"\(Int(width))\" y2=\"\(Int(height - bottom))\" stroke=\"#888\"/>",
        ]
        for (i, value) in values.enumerated() {
            let h = (height - top - bottom) * value / peak
            let x = Double(i) * step + 1, y = height - bottom - h
            let label = i < labels.count ? labels[i] : ""
            out.append(
                "<rect x=\"\(String(format: "%.1f", x))\" y=\"\(String(format: "%.1f", y))\" width=\"\(String(format: "%.1f", max(step - 2, 1)))\" height=\"\(String(format: "%.1f", h))\" fill=\"#23395d\"><title>\(escape(label)): \(format(value))</title></rect>"
            )
        }
        if let first = labels.first, let last = labels.last {
            out.append("<text x=\"0\" y=\"\(Int(height - 4))\" font-size=\"10\">\(escape(first))</text>")
            out.append("<text x=\"\(Int(width) - 30)\" y=\"\(Int(height - 4))\" font-size=\"10\">\(escape(last))</text>")
        }
        out.append("</svg>")
        return out.joined()
    }

    static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int64(value)) : String(format: "%.2f", value)
    }

    static func escape(_ text: String) -> String { ConsoleHTML.escape(text) }
}
