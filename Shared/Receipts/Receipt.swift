/// A decoded app receipt payload (docs/receipts.md, "The app receipt"). Dates are Unix milliseconds.
public struct Receipt: Sendable, Equatable {
    /// Field 0 (undocumented): `Production`, `ProductionSandbox` or `Xcode`.
    public var receiptType: String?
    /// Field 1 (undocumented): 0 outside production.
    public var appItemId: Int64?
    public var bundleId: String = ""
    /// The whole DER of field 2's value (tag and length included), as the device hash uses it.
    public var bundleIdDER: [UInt8] = []
    public var applicationVersion: String?
    public var opaqueValue: [UInt8] = []
    public var sha1Hash: [UInt8] = []
    public var creationDateMs: Int64?
    public var originalPurchaseDateMs: Int64?
    public var originalApplicationVersion: String?
    public var expirationDateMs: Int64?
    public var inApp: [InAppPurchaseReceipt] = []

    public init() {}
}

public struct InAppPurchaseReceipt: Sendable, Equatable {
    public var quantity: Int64?
    public var productId: String = ""
    public var transactionId: String = ""
    public var originalTransactionId: String?
    public var purchaseDateMs: Int64?
    public var originalPurchaseDateMs: Int64?
    /// Field 1707 (undocumented): 0 non-consumable, 1 consumable, 2 non-renewing, 3 auto-renewable.
    public var productType: Int64?
    public var expiresDateMs: Int64?
    public var webOrderLineItemId: Int64?
    public var cancellationDateMs: Int64?
    public var isTrialPeriod: Bool?
    public var isInIntroOfferPeriod: Bool?
    public var promotionalOfferId: String?

    public init() {}
}

public struct ReceiptPayloadError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
}

extension Receipt {
    /// Decodes the payload: `SET OF SEQUENCE { type INTEGER, version INTEGER, value OCTET STRING }`.
    /// Unknown attribute types are ignored; a known type with a value of the wrong shape is an error.
    public init(payload: [UInt8]) throws(ReceiptPayloadError) {
        // Walked in place: slices of an array retain and release its storage at every step, which was a
        // third of decoding a receipt.
        self = try payload.withUnsafeBufferPointer { bytes in
            Result { () throws(ReceiptPayloadError) in try Receipt(payloadBytes: bytes) }
        }.get()
    }

    init(payloadBytes payload: UnsafeBufferPointer<UInt8>) throws(ReceiptPayloadError) {
        self.init()
        var outer = DERReader(payload)
        let set = try outer.read(expecting: 0x31, "receipt payload")
        guard outer.isAtEnd else { throw ReceiptPayloadError(description: "data after the receipt payload") }
        var attributes = DERReader(set)
        while !attributes.isAtEnd {
            let (type, value) = try Self.attribute(&attributes)
            switch type {
            case 0: receiptType = try DERValue.string(value)
            case 1: appItemId = try DERValue.integer(value)
            case 2:
                bundleId = try DERValue.string(value)
                bundleIdDER = Array(value)
            case 3: applicationVersion = try DERValue.string(value)
            case 4: opaqueValue = Array(value)
            case 5: sha1Hash = Array(value)
            case 12: creationDateMs = try DERValue.date(value)
            case 17: inApp.append(try InAppPurchaseReceipt(attributes: value))
            case 18: originalPurchaseDateMs = try DERValue.date(value)
            case 19: originalApplicationVersion = try DERValue.string(value)
            case 21: expirationDateMs = try DERValue.date(value)
            default: continue
            }
        }
    }

    static func attribute(_ reader: inout DERReader) throws(ReceiptPayloadError) -> (Int64, UnsafeBufferPointer<UInt8>) {
        var seq = DERReader(try reader.read(expecting: 0x30, "receipt attribute"))
        let type = try DERValue.integerContent(try seq.read(expecting: 0x02, "attribute type"))
        _ = try seq.read(expecting: 0x02, "attribute version")
        let value = try seq.read(expecting: 0x04, "attribute value")
        return (type, value)
    }
}

extension InAppPurchaseReceipt {
    init(attributes bytes: UnsafeBufferPointer<UInt8>) throws(ReceiptPayloadError) {
        self.init()
        var outer = DERReader(bytes)
        var attributes = DERReader(try outer.read(expecting: 0x31, "in-app purchase"))
        while !attributes.isAtEnd {
            let (type, value) = try Receipt.attribute(&attributes)
            switch type {
            case 1701: quantity = try DERValue.integer(value)
            case 1702: productId = try DERValue.string(value)
            case 1703: transactionId = try DERValue.string(value)
            case 1704: purchaseDateMs = try DERValue.date(value)
            case 1705: originalTransactionId = try DERValue.string(value)
            case 1706: originalPurchaseDateMs = try DERValue.date(value)
            case 1707: productType = try DERValue.integer(value)
            case 1708: expiresDateMs = try DERValue.date(value)
            case 1711: webOrderLineItemId = try DERValue.integer(value)
            case 1712: cancellationDateMs = try DERValue.date(value)
            case 1713: isTrialPeriod = try DERValue.integer(value) != 0
            case 1719: isInIntroOfferPeriod = try DERValue.integer(value) != 0
            case 1721: promotionalOfferId = try DERValue.string(value)
            default: continue
            }
        }
    }
}

/// Reads definite-length DER TLVs from bytes (the receipt payload is DER). Contents are views of the
/// input, valid while it is: nothing is copied or retained while walking.
struct DERReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var pos = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { pos >= bytes.count }

    /// The next element: its tag and content.
    mutating func next() throws(ReceiptPayloadError) -> (tag: UInt8, content: UnsafeBufferPointer<UInt8>) {
        guard pos + 2 <= bytes.count else { throw ReceiptPayloadError(description: "truncated element") }
        let tag = bytes[pos]
        guard tag & 0x1F != 0x1F else { throw ReceiptPayloadError(description: "unexpected long-form tag") }
        var length = Int(bytes[pos + 1])
        pos += 2
        if length & 0x80 != 0 {
            let count = length & 0x7F
            guard count >= 1, count <= 4, pos + count <= bytes.count else { throw ReceiptPayloadError(description: "bad length") }
            length = 0
            for _ in 0..<count {
                length = length << 8 | Int(bytes[pos])
                pos += 1
            }
        }
        guard length <= bytes.count - pos else { throw ReceiptPayloadError(description: "truncated element") }
        let content = UnsafeBufferPointer(rebasing: bytes[pos..<(pos + length)])
        pos += length
        return (tag, content)
    }

    mutating func read(expecting tag: UInt8, _ what: String) throws(ReceiptPayloadError) -> UnsafeBufferPointer<UInt8> {
        let (found, content) = try next()
        guard found == tag else {
            throw ReceiptPayloadError(description: "\(what): expected tag \(tag), found \(found)")
        }
        return content
    }
}

/// Attribute values: a DER UTF8String / IA5String / INTEGER inside the OCTET STRING.
enum DERValue {
    static func string(_ value: UnsafeBufferPointer<UInt8>) throws(ReceiptPayloadError) -> String {
        try text(try stringContent(value))
    }

    static func stringContent(_ value: UnsafeBufferPointer<UInt8>) throws(ReceiptPayloadError) -> UnsafeBufferPointer<UInt8> {
        var r = DERReader(value)
        let (tag, content) = try r.next()
        guard tag == 0x0C || tag == 0x16 || tag == 0x13 else {
            throw ReceiptPayloadError(description: "expected a string, found tag \(tag)")
        }
        return content
    }

    static func text(_ content: UnsafeBufferPointer<UInt8>) throws(ReceiptPayloadError) -> String {
        guard let s = String(validating: content, as: UTF8.self) else {
            throw ReceiptPayloadError(description: "string is not UTF-8")
        }
        return s
    }

    static func integer(_ value: UnsafeBufferPointer<UInt8>) throws(ReceiptPayloadError) -> Int64 {
        var r = DERReader(value)
        return try integerContent(try r.read(expecting: 0x02, "integer"))
    }

    static func integerContent(_ content: UnsafeBufferPointer<UInt8>) throws(ReceiptPayloadError) -> Int64 {
        guard !content.isEmpty, content.count <= 8 else { throw ReceiptPayloadError(description: "integer out of range") }
        var v = Int64(Int8(bitPattern: content[0]))
        for b in content.dropFirst() { v = v << 8 | Int64(b) }
        return v
    }

    /// An IA5String date; the empty string means "no date" (nil), not an error. Read from the bytes; the
    /// text is made only to name an unreadable one.
    static func date(_ value: UnsafeBufferPointer<UInt8>) throws(ReceiptPayloadError) -> Int64? {
        let content = try stringContent(value)
        if content.isEmpty { return nil }
        if let ms = ReceiptDate.parse(utf8: content) { return ms }
        throw ReceiptPayloadError(description: "unreadable date \"\(try text(content))\"")
    }
}

/// RFC 3339 dates as receipts write them: `2023-10-19T01:45:40Z`, `...+03:00`, and also `...+0300`
/// (no colon), optionally with fractional seconds. Returns Unix milliseconds.
public enum ReceiptDate {
    public static func parse(_ text: String) -> Int64? {
        var text = text
        return text.withUTF8 { parse(utf8: $0) }
    }

    static func parse(utf8 b: UnsafeBufferPointer<UInt8>) -> Int64? {
        func num(_ at: Int, _ n: Int) -> Int? {
            guard at + n <= b.count else { return nil }
            var v = 0
            for i in at..<(at + n) {
                guard b[i] >= 0x30 && b[i] <= 0x39 else { return nil }
                v = v * 10 + Int(b[i] - 0x30)
            }
            return v
        }
        guard b.count >= 20, let year = num(0, 4), b[4] == UInt8(ascii: "-"), let month = num(5, 2), b[7] == UInt8(ascii: "-"),
            let day = num(8, 2), b[10] == UInt8(ascii: "T") || b[10] == UInt8(ascii: " "), let hour = num(11, 2),
            b[13] == UInt8(ascii: ":"), let minute = num(14, 2), b[16] == UInt8(ascii: ":"), let second = num(17, 2),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var i = 19
        var millis = 0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            var digits = 0
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                if digits < 3 { millis = millis * 10 + Int(b[i] - 0x30) }
                digits += 1
                i += 1
            }
            guard digits > 0 else { return nil }
            for _ in digits..<max(digits, 3) { millis *= 10 }
        }
        guard i < b.count else { return nil }
        var offsetMinutes = 0
        if b[i] == UInt8(ascii: "Z") {
            i += 1
        } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign = b[i] == UInt8(ascii: "+") ? 1 : -1
            guard let oh = num(i + 1, 2) else { return nil }
            var j = i + 3
            if j < b.count, b[j] == UInt8(ascii: ":") { j += 1 }
            guard let om = num(j, 2), oh < 24, om < 60 else { return nil }
            offsetMinutes = sign * (oh * 60 + om)
            i = j + 2
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let days = daysFromCivil(year, month, day)
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetMinutes * 60)
        return seconds * 1000 + Int64(millis)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(_ y0: Int, _ m: Int, _ d: Int) -> Int {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
