import Foundation
import SwiftASN1
import Testing

@testable import Receipts

/// `ReceiptContainer.parse` reads the usual container shape field by field (certificate fields parsed once
/// per distinct bytes) and falls back to one BER tree otherwise. Both must give the same answer for every
/// input: the receipts we mint, Xcode's, and mutants of each.
@Suite struct ReceiptContainerPathTests {
    /// What `parse` answered before the field-by-field path existed: the limits, then one BER tree.
    static func reference(_ bytes: [UInt8]) -> Result<ReceiptContainer, ReceiptContainer.ParseError> {
        do {
            try ASN1Limits().check(bytes)
        } catch {
            return .failure(.limits(error))
        }
        return Result { () throws(ReceiptContainer.ParseError) in try ReceiptContainer.parseWholeTree(bytes) }
    }

    static func parsed(_ bytes: [UInt8]) -> Result<ReceiptContainer, ReceiptContainer.ParseError> {
        Result { () throws(ReceiptContainer.ParseError) in try ReceiptContainer.parse(bytes) }
    }

    static func sources() throws -> [(name: String, bytes: [UInt8])] {
        var out: [(String, [UInt8])] = []
        for n in [1, 5, 50] {
            out.append(("minted \(n) sha256", try MintedReceiptTests.pki.sign(MintedReceiptTests.receipt(purchases: n))))
        }
        out.append(
            (
                "minted 5 sha1",
                try MintedReceiptTests.pki.sign(MintedReceiptTests.receipt(), digest: .sha1, signatureOID: .withDigest)
            ))
        for name in ["xcode-empty", "xcode-subscription", "xcode-with-transaction"] {
            out.append((name, try XcodeFixtureTests.fixture(name)))
        }
        return out
    }

    /// The OIDs read by table give exactly the text SwiftASN1 gives for the same bytes.
    @Test func knownOIDsReadAsSwiftASN1ReadsThem() throws {
        for known in ReceiptContainer.knownOIDs {
            let der = [0x06, UInt8(known.content.count)] + known.content
            let node = try BER.parse(der)
            #expect(try ASN1ObjectIdentifier(derEncoded: node).description == known.dotted)
            #expect(try ReceiptContainer.oid(node) == known.dotted)
        }
    }

    @Test func mintedAndXcodeReceiptsTakeTheFieldByFieldPathAndAgreeWithTheTree() throws {
        for (name, bytes) in try Self.sources() {
            let shaped = try ReceiptContainer.parseFieldByField(bytes)
            #expect(Result.success(shaped) == Self.reference(bytes), "\(name)")
            #expect(Self.parsed(bytes) == Self.reference(bytes), "\(name)")
            #expect(!shaped.certificates.isEmpty, "\(name)")
        }
    }

    @Test func aChangedCertificateIsParsedAgainNotTakenFromTheCache() throws {
        let bytes = try MintedReceiptTests.pki.sign(MintedReceiptTests.receipt())
        let original = try ReceiptContainer.parse(bytes)
        // The last byte of the first certificate lies in its signature: the structure stays valid.
        let first = original.certificates[0]
        let at = try #require(Self.range(of: first, in: bytes)).upperBound - 1
        var changed = bytes
        changed[at] ^= 0x01
        let again = try ReceiptContainer.parseFieldByField(changed)
        #expect(again.certificates[0] != first)
        #expect(again.certificates[0].last == first.last.map { $0 ^ 0x01 })
        #expect(Result.success(again) == Self.reference(changed))
    }

    @Test func theCertificateCacheKeepsSmallFieldsOnceAndNeverHugeOnes() throws {
        let certificate = try ReceiptContainer.parse(try MintedReceiptTests.pki.sign(MintedReceiptTests.receipt())).certificates[0]
        func field(_ copies: Int) -> ArraySlice<UInt8> {
            let content = Array(repeating: certificate, count: copies).flatMap { $0 }
            let n = content.count
            return ([0xA0, 0x83, UInt8(n >> 16), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + content)[...]
        }
        let cache = CertificateFieldCache()
        let huge = field(cache.maxFieldBytes / certificate.count + 1)
        #expect(huge.count > cache.maxFieldBytes)
        #expect(try cache.certificates(huge).count == cache.maxFieldBytes / certificate.count + 1)
        #expect(cache.count == 0)
        #expect(try cache.certificates(field(2)) == [certificate, certificate])
        #expect(try cache.certificates(field(2)) == [certificate, certificate])
        #expect(cache.count == 1)
        for copies in 3...12 { _ = try cache.certificates(field(copies)) }
        #expect(cache.count == cache.capacity)
    }

    @Test func mutantsGetTheSameAnswerOnBothPaths() throws {
        var rng = SystemRandomNumberGenerator()
        var shapedAccepted = 0
        var refused = 0
        for (name, bytes) in try Self.sources() {
            for round in 0..<1_500 {
                var m = bytes
                switch round % 4 {
                case 0: m[Int.random(in: 0..<m.count, using: &rng)] ^= UInt8(1 << Int.random(in: 0..<8, using: &rng))
                case 1: m[Int.random(in: 0..<m.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
                case 2: m.removeLast(Int.random(in: 1...min(64, m.count - 1), using: &rng))
                default:
                    // A header byte (the first 64 bytes hold every outer header) set to a length or tag form.
                    m[Int.random(in: 0..<64, using: &rng)] = [0x00, 0x30, 0x31, 0x80, 0x81, 0x82, 0xA0, 0xA1, 0x1F].randomElement(using: &rng)!
                }
                let expected = Self.reference(m)
                let same = Self.parsed(m) == expected  // compared here: the values themselves are kilobytes
                #expect(same, "\(name) round \(round): \(expected.map { _ in "accepted" })")
                if case .success = expected, (try? ReceiptContainer.parseFieldByField(m)) != nil { shapedAccepted += 1 }
                if case .failure = expected { refused += 1 }
            }
        }
        // Both outcomes occur, so the comparison above covers the shortcut's successes and the fallback's errors.
        #expect(shapedAccepted > 100)
        #expect(refused > 100)
    }

    static func range(of needle: [UInt8], in haystack: [UInt8]) -> Range<Int>? {
        guard needle.count <= haystack.count else { return nil }
        for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] {
            if haystack[i..<(i + needle.count)].elementsEqual(needle) { return i..<(i + needle.count) }
        }
        return nil
    }
}
