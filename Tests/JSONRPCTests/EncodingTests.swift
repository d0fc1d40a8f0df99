import Foundation
import IAPProtocol
import Testing

@testable import JSONRPC

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
        let product = Product(
            productId: "p", type: .nonConsumable, referenceName: "R", title: "Tïtle \"q\" \\ /",
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

@Suite struct StreamableParityTests {
    /// What the type's synthesized Codable conformance writes, through the generic path.
    private func viaEncoder<T: Encodable>(_ value: T) throws -> String {
        let writer = JSONStreamWriter()
        try value.encode(to: JSONStreamEncoder(writer: writer, depth: 0))
        writer.close(from: 0)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    private func viaStreamable<T: JSONStreamable>(_ value: T) -> String {
        let writer = JSONStreamWriter()
        value.writeJSON(to: writer)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    @Test func handWrittenWritersMatchCodableByteForByte() throws {
        let grants: [Grant] = [
            .coins(-5), .content(entitlement: "e\"", contentIds: []), .content(entitlement: "e", contentIds: ["a", "b"]),
            .subscription(entitlement: "s", subscriptionGroup: "g"), .timeLimited(entitlement: "t", durationDays: 30),
        ]
        for grant in grants {
            #expect(try viaEncoder(grant) == viaStreamable(grant))
        }
        for price in [
            Price(storefront: "USA", currency: "USD", amount: "0.99"), Price(storefront: "JPN", currency: "JPY", amount: "120", formatted: "¥120"),
        ] {
            #expect(try viaEncoder(price) == viaStreamable(price))
        }
        for product in [
            Product(
                productId: "p\n", type: .autoRenewable, referenceName: "r", title: "t", description: "d", status: .retired,
                grant: grants[3], price: nil),
            Product(
                productId: "p", type: .consumable, referenceName: "r", title: "ü", description: "", status: .active,
                grant: grants[0], price: Price(storefront: "USA", currency: "USD", amount: "1")),
            Product(
                productId: "s", type: .autoRenewable, referenceName: "r", title: "t", description: "d", status: .active, grant: grants[3],
                offers: [
                    SubscriptionOffer(offerId: "a", eligibility: .init(kind: .lapsed)),
                    SubscriptionOffer(
                        offerId: "b\"", eligibility: .init(kind: .subscribedAtMost, times: 2), startsAtMs: 1, endsAtMs: 2),
                ], googlePlay: .init(productId: "vip", basePlanId: "yearly")),
            Product(
                productId: "g", type: .consumable, referenceName: "r", title: "t", description: "d", status: .active, grant: grants[0],
                googlePlay: .init(productId: "com.game.gems")),
        ] {
            #expect(try viaEncoder(product) == viaStreamable(product))
            let list = CatalogListProducts.Result(etag: "\"e\"", notModified: false, products: [product, product])
            #expect(try viaEncoder(list) == viaStreamable(list))
        }
        let empty = CatalogListProducts.Result(etag: "", notModified: true, products: [])
        #expect(try viaEncoder(empty) == viaStreamable(empty))
    }

    @Test func verifyReceiptWritersMatchCodableByteForByte() throws {
        var full = InAppPurchase(quantity: "1", productId: "p\"", transactionId: "1")
        full.originalTransactionId = "2"
        full.purchaseDate = "2026-01-01 00:00:00 Etc/GMT"
        full.purchaseDateMs = "1767225600000"
        full.originalPurchaseDate = "a"
        full.originalPurchaseDateMs = "b"
        full.expiresDate = "c"
        full.expiresDateMs = "d"
        full.cancellationDate = "e"
        full.cancellationDateMs = "f"
        full.webOrderLineItemId = "g"
        full.isTrialPeriod = "false"
        full.isInIntroOfferPeriod = "true"
        full.promotionalOfferId = "ü"
        full.productType = "h"
        let bare = InAppPurchase(quantity: "", productId: "", transactionId: "")
        for purchase in [full, bare] { #expect(try viaEncoder(purchase) == viaStreamable(purchase)) }
        var body = ReceiptBody(bundleId: "com.example", inApp: [full, bare])
        let bareBody = ReceiptBody(bundleId: "b", inApp: [])
        body.receiptType = "Production"
        body.appItemId = "1"
        body.applicationVersion = "2"
        body.originalApplicationVersion = "3"
        body.receiptCreationDate = "4"
        body.receiptCreationDateMs = "5"
        body.originalPurchaseDate = "6"
        body.originalPurchaseDateMs = "7"
        body.expirationDate = "8"
        body.expirationDateMs = "9"
        for b in [body, bareBody] { #expect(try viaEncoder(b) == viaStreamable(b)) }
        for response in [
            VerifyReceiptResponse(status: 0, environment: "Sandbox", receipt: body), VerifyReceiptResponse(status: 21002, reason: "malformed"),
            VerifyReceiptResponse(status: -1, reason: "r", environment: "e", receipt: bareBody),
        ] {
            #expect(try viaEncoder(response) == viaStreamable(response))
            #expect(try JSONByteEncoder.encode(response) == Array(viaEncoder(response).utf8))
        }
    }
}
