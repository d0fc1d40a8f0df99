/// Hard limits on hostile ASN.1 input, checked by one iterative pass over the TLV headers before any
/// parser builds a tree: total size, nesting depth and element count. Definite and indefinite lengths
/// (BER) are both walked; nothing is allocated per element.
public struct ASN1Limits: Sendable {
    public var maxBytes = 1 << 20
    public var maxDepth = 32
    public var maxElements = 100_000

    public init() {}

    public enum Violation: Error, Sendable, Equatable {
        case tooLarge, tooDeep, tooManyElements, truncated, malformedLength
    }

    public func check(_ bytes: [UInt8]) throws(Violation) {
        guard bytes.count <= maxBytes else { throw .tooLarge }
        var pos = 0
        var elements = 0
        // Ends of the enclosing definite-length elements, and markers (-1) for indefinite ones.
        var stack: [Int] = []
        stack.reserveCapacity(maxDepth)
        while pos < bytes.count {
            // Close every definite element that ends here.
            while let end = stack.last, end >= 0, pos == end { stack.removeLast() }
            if pos >= bytes.count { break }
            if let end = stack.last, end >= 0, pos > end { throw .malformedLength }
            // End-of-contents octets close an indefinite element.
            if bytes[pos] == 0, pos + 1 < bytes.count, bytes[pos + 1] == 0, stack.last == -1 {
                stack.removeLast()
                pos += 2
                continue
            }
            elements += 1
            guard elements <= maxElements else { throw .tooManyElements }
            let identifier = bytes[pos]
            pos += 1
            if identifier & 0x1F == 0x1F {  // long-form tag number
                var n = 0
                while pos < bytes.count, bytes[pos] & 0x80 != 0 {
                    pos += 1
                    n += 1
                    guard n < 4 else { throw .malformedLength }
                }
                pos += 1
            }
            guard pos < bytes.count else { throw .truncated }
            let first = bytes[pos]
            pos += 1
            let constructed = identifier & 0x20 != 0
            if first == 0x80 {
                guard constructed else { throw .malformedLength }
                stack.append(-1)
            } else {
                var length = 0
                if first & 0x80 == 0 {
                    length = Int(first)
                } else {
                    let count = Int(first & 0x7F)
                    guard count > 0, count <= 4, pos + count <= bytes.count else { throw .malformedLength }
                    for _ in 0..<count {
                        length = length << 8 | Int(bytes[pos])
                        pos += 1
                    }
                }
                guard length <= bytes.count - pos else { throw .truncated }
                if constructed {
                    stack.append(pos + length)
                } else {
                    pos += length
                }
            }
            guard stack.count <= maxDepth else { throw .tooDeep }
        }
        while let end = stack.last, end >= 0, pos == end { stack.removeLast() }
        guard stack.isEmpty else { throw .truncated }
    }
}
