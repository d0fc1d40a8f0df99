import Foundation
import NIOConcurrencyHelpers
import SwiftASN1

/// The parts of a PKCS#7 / CMS SignedData container that receipt verification needs.
/// Parsed as BER (a superset of DER): Xcode receipts use indefinite lengths and a chunked,
/// constructed OCTET STRING payload.
public struct ReceiptContainer: Sendable, Equatable {
    /// The signed content: the receipt payload (DER `SET OF ReceiptAttribute`).
    public let payload: [UInt8]
    /// Certificates carried in the container, DER, in the order found.
    public let certificates: [[UInt8]]
    public let signer: SignerInfo

    public struct SignerInfo: Sendable, Equatable {
        /// OID of the digest algorithm (SHA-1 `1.3.14.3.2.26`, SHA-256 `2.16.840.1.101.3.4.2.1`).
        public let digestAlgorithm: String
        /// OID of the signature algorithm: `rsaEncryption` or `sha*WithRSAEncryption`.
        public let signatureAlgorithm: String
        public let signature: [UInt8]
        /// DER of the signed attributes re-tagged as SET (what the signature covers), when present.
        public let signedAttributes: [UInt8]?
        /// The `messageDigest` signed attribute, when signed attributes are present.
        public let messageDigest: [UInt8]?
        public let issuerAndSerial: [UInt8]?
    }

    public enum ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        case limits(ASN1Limits.Violation)
        case malformed(String)

        public var description: String {
            switch self {
            case .limits(let v): return "receipt exceeds the parser's limits (\(v))"
            case .malformed(let why): return "receipt container is malformed: \(why)"
            }
        }
    }

    static let signedDataOID = "1.2.840.113549.1.7.2"
    static let dataOID = "1.2.840.113549.1.7.1"
    static let messageDigestOID = "1.2.840.113549.1.9.4"

    public static func parse(_ bytes: [UInt8], limits: ASN1Limits = .init()) throws(ParseError) -> ReceiptContainer {
        do {
            try limits.check(bytes)
        } catch {
            throw .limits(error)
        }
        if let shaped = try? parseFieldByField(bytes) { return shaped }
        return try parseWholeTree(bytes)
    }

    /// The container parsed as one BER tree: the reference every other path must agree with, and the path
    /// for anything not in the usual shape (non-minimal lengths, long tags, unexpected fields, errors).
    static func parseWholeTree(_ bytes: [UInt8]) throws(ParseError) -> ReceiptContainer {
        do {
            let root = try BER.parse(bytes)
            let contentInfo = try children(root, "ContentInfo")
            guard contentInfo.count >= 2, try oid(contentInfo[0]) == signedDataOID else {
                throw ParseError.malformed("not a PKCS#7 SignedData")
            }
            let explicit = try children(contentInfo[1], "content [0]")
            guard contentInfo[1].identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific), explicit.count == 1 else {
                throw ParseError.malformed("SignedData is not in an explicit [0]")
            }
            let signedData = try children(explicit[0], "SignedData")
            guard signedData.count >= 4 else { throw ParseError.malformed("SignedData is missing fields") }
            // signedData[0] version, [1] digestAlgorithms, [2] encapContentInfo, then [0] certificates, [1] crls, signerInfos
            return try assemble(encap: signedData[2], signerInfos: signedData.dropFirst(3).last { $0.identifier == .set }) {
                var certificates: [[UInt8]] = []
                for node in signedData.dropFirst(3) where node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                    certificates += try certificateList(node)
                }
                return certificates
            }
        } catch let error as ParseError {
            throw error
        } catch {
            throw .malformed("\(error)")
        }
    }

    /// The same container, read without building a tree of Apple's certificates on every receipt: for the
    /// usual shape (definite lengths in their shortest form, or indefinite ones; ContentInfo {signedData OID,
    /// [0] {SignedData {version, digestAlgorithms, encapContentInfo, [0] certificates?, signerInfos}}}) the
    /// outer headers are walked here and each field is parsed as BER on its own, the certificate field only
    /// when its bytes differ from one already parsed. Every part `parseWholeTree` parses is parsed (or was,
    /// byte for byte), and `ASN1Limits` bounded the whole depth first, so this accepts exactly what that does
    /// and answers the same; anything else throws and the caller takes `parseWholeTree`.
    static func parseFieldByField(_ bytes: [UInt8]) throws -> ReceiptContainer {
        let root = try DERElement.read(bytes, at: 0, within: bytes.count)
        let contentInfo = try root.children(bytes)
        guard root.tag == 0x30, root.end == bytes.count, contentInfo.count == 2, contentInfo[1].tag == 0xA0,
            bytes[contentInfo[0].start..<contentInfo[0].end].elementsEqual(signedDataOIDDER)
        else { throw DERElement.NotDER() }
        let explicit = try contentInfo[1].children(bytes)
        guard explicit.count == 1, explicit[0].tag == 0x30 else { throw DERElement.NotDER() }
        let fields = try explicit[0].children(bytes)
        let hasCertificates = fields.count == 5 && fields[3].tag == 0xA0
        guard fields.count == 4 || hasCertificates, fields[0].tag == 0x02, fields[1].tag == 0x31, fields[2].tag == 0x30,
            let last = fields.last, last.tag == 0x31
        else { throw DERElement.NotDER() }
        func slice(_ e: DERElement) -> ArraySlice<UInt8> { bytes[e.start..<e.end] }
        // The fields parseWholeTree would parse within the tree, each parsed on its own.
        _ = try BER.parse(slice(fields[0]))
        _ = try BER.parse(slice(fields[1]))
        let encap = try BER.parse(slice(fields[2]))
        let signerInfos = try BER.parse(slice(last))
        return try assemble(encap: encap, signerInfos: signerInfos) {
            hasCertificates ? try CertificateFieldCache.shared.certificates(slice(fields[3])) : []
        }
    }

    /// The DER of the signedData OID (1.2.840.113549.1.7.2), tag and length included.
    static let signedDataOIDDER: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02]

    /// The certificates of a `[0] certificates` field, each as its own DER.
    static func certificateList(_ node: ASN1Node) throws -> [[UInt8]] {
        try children(node, "certificates").map { cert in
            guard !cert.encodedBytes.isEmpty else { throw ParseError.malformed("a certificate is not DER") }
            return Array(cert.encodedBytes)
        }
    }

    /// The payload, certificates and the one signer, from the parsed fields, checked in this order (both
    /// paths end here).
    static func assemble(
        encap encapNode: ASN1Node, signerInfos: ASN1Node?, certificates: () throws -> [[UInt8]]
    ) throws -> ReceiptContainer {
        let encap = try children(encapNode, "encapContentInfo")
        guard encap.count == 2, try oid(encap[0]) == dataOID else { throw ParseError.malformed("content is not PKCS#7 data") }
        let eContent = try children(encap[1], "eContent [0]")
        guard eContent.count == 1 else { throw ParseError.malformed("eContent") }
        let payload = try octetString(eContent[0])
        let certificates = try certificates()
        guard let signerInfos else { throw ParseError.malformed("no signerInfos") }
        let signers = try children(signerInfos, "signerInfos")
        guard signers.count == 1 else { throw ParseError.malformed("expected exactly one signer, found \(signers.count)") }
        return ReceiptContainer(payload: payload, certificates: certificates, signer: try signerInfo(signers[0]))
    }

    private static func signerInfo(_ node: ASN1Node) throws -> SignerInfo {
        let fields = try children(node, "SignerInfo")
        guard fields.count >= 5 else { throw ParseError.malformed("SignerInfo is missing fields") }
        var i = 1
        let sid = fields[i]
        i += 1
        let digestAlgorithm = try algorithm(fields[i])
        i += 1
        var signedAttributes: [UInt8]?
        var messageDigest: [UInt8]?
        if fields[i].identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
            // The signature covers the attributes' DER with the SET tag (0x31), not the [0] tag.
            var der = Array(fields[i].encodedBytes)
            guard !der.isEmpty else { throw ParseError.malformed("signed attributes are not DER") }
            der[0] = 0x31
            signedAttributes = der
            for attribute in try children(fields[i], "signedAttrs") {
                let parts = try children(attribute, "Attribute")
                if parts.count == 2, try oid(parts[0]) == messageDigestOID, let value = try children(parts[1], "values").first {
                    messageDigest = try octetString(value)
                }
            }
            i += 1
        }
        guard i + 1 < fields.count else { throw ParseError.malformed("SignerInfo is missing its signature") }
        let signatureAlgorithm = try algorithm(fields[i])
        let signature = try octetString(fields[i + 1])
        return SignerInfo(
            digestAlgorithm: digestAlgorithm, signatureAlgorithm: signatureAlgorithm, signature: signature,
            signedAttributes: signedAttributes, messageDigest: messageDigest,
            issuerAndSerial: sid.encodedBytes.isEmpty ? nil : Array(sid.encodedBytes))
    }

    static func children(_ node: ASN1Node, _ what: String) throws -> [ASN1Node] {
        guard case .constructed(let nodes) = node.content else { throw ParseError.malformed("\(what) is not constructed") }
        return Array(nodes)
    }

    static func oid(_ node: ASN1Node) throws -> String {
        guard node.identifier == .objectIdentifier else { throw ParseError.malformed("expected an OID") }
        // The OIDs every receipt carries, by their content bytes: the same dotted text SwiftASN1 would give for
        // exactly these bytes, without building it (ASN1ObjectIdentifier's description was ~4% of verifyReceipt).
        if case .primitive(let content) = node.content,
            let known = knownOIDs.first(where: { $0.content.elementsEqual(content) })
        {
            return known.dotted
        }
        return try ASN1ObjectIdentifier(derEncoded: node).description
    }

    /// Content bytes (no tag, no length) and dotted text of the OIDs in Apple's and Xcode's receipts.
    static let knownOIDs: [(content: [UInt8], dotted: String)] = [
        ([0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x02], signedDataOID),
        ([0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x07, 0x01], dataOID),
        ([0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x04], messageDigestOID),
        ([0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x03], "1.2.840.113549.1.9.3"),  // contentType
        ([0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x09, 0x05], "1.2.840.113549.1.9.5"),  // signingTime
        ([0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01], "1.2.840.113549.1.1.1"),  // rsaEncryption
        ([0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x05], "1.2.840.113549.1.1.5"),  // sha1WithRSAEncryption
        ([0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0B], "1.2.840.113549.1.1.11"),  // sha256WithRSAEncryption
        ([0x2B, 0x0E, 0x03, 0x02, 0x1A], "1.3.14.3.2.26"),  // SHA-1
        ([0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01], "2.16.840.1.101.3.4.2.1"),  // SHA-256
    ]

    static func algorithm(_ node: ASN1Node) throws -> String {
        guard let first = try children(node, "AlgorithmIdentifier").first else { throw ParseError.malformed("empty AlgorithmIdentifier") }
        return try oid(first)
    }

    /// An OCTET STRING's content; a constructed (chunked, BER) one is concatenated.
    static func octetString(_ node: ASN1Node) throws -> [UInt8] {
        guard node.identifier == .octetString else { throw ParseError.malformed("expected an OCTET STRING") }
        switch node.content {
        case .primitive(let bytes):
            return Array(bytes)
        case .constructed(let chunks):
            var out: [UInt8] = []
            for chunk in chunks { out += try octetString(chunk) }
            return out
        }
    }
}

/// One element's position: tag byte, where it starts, where its content starts and ends, where it ends.
/// Only headers BER accepts: a one-byte tag, a definite length in its shortest form (as DER writes it), or
/// an indefinite length on a constructed element (as Apple's and Xcode's receipts use), whose end is found
/// by walking its children's headers to the end-of-contents octets; nothing is allocated.
struct DERElement {
    let tag: UInt8
    let start: Int
    let contentStart: Int
    let contentEnd: Int
    let end: Int

    struct NotDER: Error {}

    /// The element at `start`, which must end by `limit` (its parent's content end).
    static func read(_ bytes: [UInt8], at start: Int, within limit: Int) throws(NotDER) -> DERElement {
        guard start + 2 <= limit else { throw NotDER() }
        let tag = bytes[start]
        guard tag & 0x1F != 0x1F, tag != 0 else { throw NotDER() }
        let first = Int(bytes[start + 1])
        var pos = start + 2
        if first == 0x80 {
            guard tag & 0x20 != 0 else { throw NotDER() }
            let contentStart = pos
            while true {
                guard pos + 2 <= limit else { throw NotDER() }
                if bytes[pos] == 0 && bytes[pos + 1] == 0 {
                    return DERElement(tag: tag, start: start, contentStart: contentStart, contentEnd: pos, end: pos + 2)
                }
                pos = try read(bytes, at: pos, within: limit).end
            }
        }
        var length = first
        if first & 0x80 != 0 {
            let count = first & 0x7F
            guard (1...4).contains(count), pos + count <= limit, bytes[pos] != 0 else { throw NotDER() }
            length = 0
            for _ in 0..<count {
                length = length << 8 | Int(bytes[pos])
                pos += 1
            }
            guard length >= 0x80 else { throw NotDER() }
        }
        guard length <= limit - pos else { throw NotDER() }
        return DERElement(tag: tag, start: start, contentStart: pos, contentEnd: pos + length, end: pos + length)
    }

    /// The elements that fill this one's content exactly.
    func children(_ bytes: [UInt8]) throws(NotDER) -> [DERElement] {
        var out: [DERElement] = []
        var pos = contentStart
        while pos < contentEnd {
            let child = try DERElement.read(bytes, at: pos, within: contentEnd)
            out.append(child)
            pos = child.end
        }
        return out
    }
}

/// The certificate fields of recent receipts, parsed once: receipts signed by the same chain carry the same
/// bytes there, and building SwiftASN1's tree of three certificates was most of a container's parse.
/// At most `capacity` fields of at most `maxFieldBytes` each (Apple's chain is about 4 KB; a receipt crafted with
/// a huge field is parsed each time rather than kept, so nobody can fill memory or make lookups compare megabytes
/// under the lock), most recent first; a field that fails to parse is not kept.
final class CertificateFieldCache: Sendable {
    static let shared = CertificateFieldCache()
    let capacity = 8
    let maxFieldBytes = 16 * 1024
    private let entries = NIOLockedValueBox<[(field: [UInt8], certificates: [[UInt8]])]>([])

    /// Fields kept now (for tests).
    var count: Int { entries.withLockedValue { $0.count } }

    func certificates(_ field: ArraySlice<UInt8>) throws -> [[UInt8]] {
        guard field.count <= maxFieldBytes else { return try ReceiptContainer.certificateList(try BER.parse(field)) }
        let hit = entries.withLockedValue { entries -> [[UInt8]]? in
            guard let i = entries.firstIndex(where: { Self.same($0.field, field) }) else { return nil }
            if i > 0 { entries.insert(entries.remove(at: i), at: 0) }
            return entries[0].certificates
        }
        if let hit { return hit }
        // A field seen for the first time (or changed) is parsed exactly as the whole tree would parse it.
        let parsed = try ReceiptContainer.certificateList(try BER.parse(field))
        entries.withLockedValue { entries in
            entries.insert((Array(field), parsed), at: 0)
            if entries.count > capacity { entries.removeLast() }
        }
        return parsed
    }

    static func same(_ a: [UInt8], _ b: ArraySlice<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        return a.withUnsafeBytes { x in
            b.withUnsafeBytes { y in
                guard let p = x.baseAddress, let q = y.baseAddress else { return x.count == 0 }
                return memcmp(p, q, x.count) == 0
            }
        }
    }
}
