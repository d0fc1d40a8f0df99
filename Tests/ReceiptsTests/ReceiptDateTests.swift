import Foundation
import Receipts
import Testing

/// Receipt dates written and read: checked against Foundation's formatter (an implementation nobody here
/// wrote) and by reading them back.
@Suite struct ReceiptDateTests {
    static func foundation(_ ms: Int64, _ pattern: String) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.calendar = Calendar(identifier: .gregorian)
        f.dateFormat = pattern
        return f.string(from: Date(timeIntervalSince1970: Double(ms.dividedReportingOverflow(by: 1000).partialValue) - (ms % 1000 < 0 ? 1 : 0)))
    }

    @Test func bothFormsMatchFoundationAndReadBack() {
        var rng = SystemRandomNumberGenerator()
        let edges: [Int64] = [0, -1, 999, 1000, 951_782_400_000, 951_868_799_999, 4_102_444_800_000, 253_402_300_799_999]
        let random = (0..<3_000).map { _ in Int64.random(in: 0..<4_102_444_800_000, using: &rng) }
        for ms in edges + random {
            let floor = ms - ((ms % 1000) + 1000) % 1000
            #expect(ReceiptDate.formatAppleGMT(ms) == Self.foundation(ms, "yyyy-MM-dd HH:mm:ss") + " Etc/GMT", "\(ms)")
            #expect(ReceiptDate.format(ms) == Self.foundation(ms, "yyyy-MM-dd'T'HH:mm:ss") + "Z", "\(ms)")
            if ms >= 0 { #expect(ReceiptDate.parse(ReceiptDate.format(ms)) == floor, "\(ms)") }
        }
        // Years outside four digits keep the general form.
        #expect(ReceiptDate.format(-62_135_596_800_001).hasPrefix("0-12-31T23:59:59"))
    }
}
