import SwiftASN1

/// The parts of a PKCS#7 / CMS SignedData container that receipt verification needs.
/// Parsed as BER (a superset of DER): Xcode receipts use indefinite lengths and a chunked,
/// constructed OCTET STRING payload.
public struct ReceiptContainer: Sendable {
    /// The signed content: the receipt payload (DER `SET OF ReceiptAttribute`).
    public let payload: [UInt8]
    /// Certificates carried in the container, DER, in the order found.
    public let certificates: [[UInt8]]
    public let signer: SignerInfo

    public struct SignerInfo: Sendable {
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
        do {
            return try parseChecked(bytes)
        } catch let error as ParseError {
            throw error
        } catch {
            throw .malformed("\(error)")
        }
    }

    private static func parseChecked(_ bytes: [UInt8]) throws -> ReceiptContainer {
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
        let encap = try children(signedData[2], "encapContentInfo")
        guard encap.count == 2, try oid(encap[0]) == dataOID else { throw ParseError.malformed("content is not PKCS#7 data") }
        let eContent = try children(encap[1], "eContent [0]")
        guard eContent.count == 1 else { throw ParseError.malformed("eContent") }
        let payload = try octetString(eContent[0])

        var certificates: [[UInt8]] = []
        var signerInfos: ASN1Node?
        for node in signedData.dropFirst(3) {
            if node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
                for cert in try children(node, "certificates") {
                    guard let der = cert.encodedBytes.isEmpty ? nil : Array(cert.encodedBytes) else {
                        throw ParseError.malformed("a certificate is not DER")
                    }
                    certificates.append(der)
                }
            } else if node.identifier == .set {
                signerInfos = node
            }
        }
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
        return try ASN1ObjectIdentifier(derEncoded: node).description
    }

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
