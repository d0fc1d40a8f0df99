import Foundation
import Receipts
import Testing

/// The three real Xcode StoreKit receipts of Tests/ReceiptsTests/Fixtures (with the values published with them, their
/// expected values).
@Suite struct XcodeFixtureTests {
    static func fixture(_ name: String) throws -> [UInt8] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/\(name).receipt")
        return Array(try Data(contentsOf: url))
    }

    static func ms(_ text: String) -> Int64 { ReceiptDate.parse(text)! }

    static let withXcode = ReceiptVerifier(
        trust: ReceiptTrust(
            roots: ShippedTrust.appleRoots,
            xcodeCertificate: ShippedTrust.certificate(ShippedTrust.storeKitTestDER)))
    static let appleOnly = ReceiptVerifier(trust: ReceiptTrust(roots: ShippedTrust.appleRoots))

    @Test func withTransactionDecodesToItsDocumentedValues() throws {
        let bytes = try Self.fixture("xcode-with-transaction")
        #expect(bytes.count == 1739)
        let container = try ReceiptContainer.parse(bytes)
        #expect(container.signer.digestAlgorithm == "2.16.840.1.101.3.4.2.1")
        let r = try Receipt(payload: container.payload)
        #expect(r.receiptType == "Xcode")
        #expect(r.appItemId == 0)
        #expect(r.bundleId == "com.example.naturelab.backyardbirds.example")
        #expect(r.applicationVersion == "1")
        #expect(r.creationDateMs == Self.ms("2023-10-19T01:45:40Z"))
        #expect(r.opaqueValue == [0xf2, 0xbf, 0xf5, 0xfb, 0x0f, 0x00, 0x00, 0x00])
        #expect(r.sha1Hash.map { String(format: "%02x", $0) }.joined() == "1653abcba0767179556568e83f5041b638e29a85")
        #expect(r.inApp.count == 1)
        let p = r.inApp[0]
        #expect(p.productId == "pass.premium")
        #expect(p.transactionId == "0")
        #expect(p.quantity == 1)
        #expect(p.purchaseDateMs == Self.ms("2023-10-19T01:45:36Z"))
        #expect(p.expiresDateMs == Self.ms("2023-11-19T01:45:36Z"))
        #expect(p.isInIntroOfferPeriod == true)
        #expect(p.originalTransactionId == nil)
        #expect(p.originalPurchaseDateMs == nil)
    }

    @Test func emptyDecodesToItsDocumentedValues() throws {
        let bytes = try Self.fixture("xcode-empty")
        #expect(bytes.count == 1589)
        let r = try Receipt(payload: try ReceiptContainer.parse(bytes).payload)
        #expect(r.receiptType == "Xcode")
        #expect(r.appItemId == 0)
        #expect(r.bundleId == "com.example.naturelab.backyardbirds.example")
        #expect(r.applicationVersion == "1")
        #expect(r.creationDateMs == Self.ms("2023-10-19T01:18:54Z"))
        #expect(r.inApp.isEmpty)
        #expect(r.expirationDateMs == Self.ms("4001-01-01T00:00:00Z"))
        #expect(r.opaqueValue == [0xd1, 0xbc, 0xfe, 0xcf, 0x04, 0x00, 0x00, 0x00])
        #expect(r.sha1Hash.map { String(format: "%02x", $0) }.joined() == "e271302b6e16c5984a8b43d21936205a85ce22a3")
    }

    @Test func subscriptionDecodesToItsDocumentedValues() throws {
        let bytes = try Self.fixture("xcode-subscription")
        #expect(bytes.count == 1761)
        let r = try Receipt(payload: try ReceiptContainer.parse(bytes).payload)
        #expect(r.receiptType == "Xcode")
        #expect(r.bundleId == "com.rd.eehelper")
        #expect(r.applicationVersion == "2020.10.02.1149")
        #expect(r.creationDateMs == Self.ms("2020-10-16T14:29:30+0300"))
        #expect(r.expirationDateMs == Self.ms("4001-01-01T02:00:00+0200"))
        #expect(r.opaqueValue == [0x34, 0x5d, 0xf9, 0xb7, 0x0c, 0x00, 0x00, 0x00])
        #expect(r.sha1Hash.map { String(format: "%02x", $0) }.joined() == "eb92032f621090a22c7b56cb06e05245349cc918")
        #expect(r.inApp.count == 1)
        let p = r.inApp[0]
        #expect(p.productId == "com.rd.eehelper.pro_subscription")
        #expect(p.transactionId == "0")
        #expect(p.quantity == 1)
        #expect(p.purchaseDateMs == Self.ms("2020-10-16T14:29:30+0300"))
        #expect(p.expiresDateMs == Self.ms("2021-10-16T14:29:30+0300"))
        #expect(p.isInIntroOfferPeriod == false)
        #expect(p.originalTransactionId == nil)
    }

    @Test(arguments: ["xcode-with-transaction", "xcode-empty", "xcode-subscription"])
    func verifiesOnlyWhereXcodeReceiptsAreAllowed(_ name: String) async throws {
        let bytes = try Self.fixture(name)
        guard case .success(let verified) = await Self.withXcode.verify(bytes, options: .init()) else {
            Issue.record("refused with --allow-xcode")
            return
        }
        #expect(verified.environment == "Xcode")
        guard case .failure(let failure) = await Self.appleOnly.verify(bytes, options: .init()) else {
            Issue.record("accepted without --allow-xcode")
            return
        }
        #expect(failure == .xcodeNotAllowed)
        #expect(failure.status == 21003)
    }

    @Test func datesAcceptEveryOffsetStyleAndRefuseJunk() {
        let utc = ReceiptDate.parse("2021-04-03T19:38:45Z")
        #expect(utc == 1_617_478_725_000)
        #expect(ReceiptDate.parse("2021-04-03T22:38:45+03:00") == utc)
        #expect(ReceiptDate.parse("2021-04-03T22:38:45+0300") == utc)
        #expect(ReceiptDate.parse("2021-04-03T16:38:45-0300") == utc)
        #expect(ReceiptDate.parse("2021-04-03T19:38:45.250Z") == utc! + 250)
        for junk in ["", "2021-04-03", "2021-13-03T19:38:45Z", "2021-04-03T19:38:45", "2021-04-03T19:38:45+3", "yesterday"] {
            #expect(ReceiptDate.parse(junk) == nil, "\(junk)")
        }
    }
}
