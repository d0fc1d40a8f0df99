import Foundation
import IAPProtocol
import JSONRPC
import Testing

@Suite struct EncodingTests {
    /// Decodes both encoders' output as JSON values: the streaming encoder must say the same thing
    /// as Foundation's.
    private func sameAsFoundation<T: Codable>(_ value: T) throws {
        let ours = try JSONByteEncoder.encode(value)
        let theirs = try JSONEncoder().encode(value)
        let a = try JSONDecoder().decode(JSONValue.self, from: Data(ours))
        let b = try JSONDecoder().decode(JSONValue.self, from: theirs)
        #expect(a == b, "\(String(decoding: ours, as: UTF8.self)) vs \(String(decoding: theirs, as: UTF8.self))")
        #expect(JSONScanner.isValid(ours))
    }

    @Test func matchesFoundationOnTheContractTypes() throws {
        let product = Product(productId: "p", type: .nonConsumable, referenceName: "R", title: "Tïtle \"q\" \\ /",
                              description: "line\nbreak\ttab\u{01}", status: .active,
                              grant: .content(entitlement: "e", contentIds: ["a", "b"]),
                              price: Price(storefront: "DEU", currency: "EUR", amount: "0.99", formatted: "0,99 €"))
        try sameAsFoundation(product)
        try sameAsFoundation(CatalogListProducts.Result(etag: "x", notModified: true, products: []))
        try sameAsFoundation(CatalogListProducts.Result(etag: "x", notModified: false, products: [product, product]))
        try sameAsFoundation(LedgerEntry(id: Int64.max, delta: Int64.min, balance: 0, kind: .spend, createdAtMs: -1))
        try sameAsFoundation(RPCError.rateLimited(retryAfterMs: 10))
        try sameAsFoundation(EmptyResult())
        try sameAsFoundation(["k": JSONValue.array([.null, .bool(true), .double(1.25), .int(-3), .string("")])])
        try sameAsFoundation(Grant.timeLimited(entitlement: "e", durationDays: 30))
        try sameAsFoundation(HealthReport(status: .ok, service: "s", version: "1", uptimeMs: 5, dependencies: []))
    }

    @Test func omitsNilOptionalsAndEncodesEmptyValuesAsObjects() throws {
        let bytes = try JSONByteEncoder.encode(Price(storefront: "USA", currency: "USD", amount: "1.00"))
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"storefront":"USA","currency":"USD","amount":"1.00"}"#)
        #expect(String(decoding: try JSONByteEncoder.encode(EmptyResult()), as: UTF8.self) == "{}")
    }

    @Test func refusesNonFiniteNumbers() {
        #expect(throws: EncodingError.self) { try JSONByteEncoder.encode([Double.nan]) }
    }
}

extension JSONScanner {
    static func isValid(_ bytes: [UInt8]) -> Bool { (try? scan(bytes)) != nil }
}
